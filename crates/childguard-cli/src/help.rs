//! The `--help` texts.

/// `childguard --help`.
pub const TOP: &str = "\
Usage: childguard <COMMAND> [OPTIONS]

Run a command under a signal ladder — timeout(1) with rungs — and report how it ended.

Commands:
  run [OPTIONS] [--] CMD [ARG...]   run CMD; stop it with the ladder on a trigger
  timeout [OPTION] DURATION CMD     GNU timeout(1)'s command line (also as argv[0] `timeout`)
  with [--ready C] -- SERVER.. -- CMD  start servers, wait until ready, run CMD, close them
  init [OPTIONS] -- CMD [ARG...]    a container's PID 1: tini's behaviour, plus the ladder
                                    within the engine's stop budget (also as argv[0] `tini`)
  probe [OPTIONS] -- SERVER [ARG...] measure what each signal does to SERVER; recommend a ladder
  demo                              close a server with a 10 s read in flight, in ~1 ms
  help [run|demo]                   print help

Options:
  -h, --help       print help
  -V, --version    print the version

Examples:
  childguard run --timeout 30s -- make test
  childguard run --timeout 200ms --ladder HUP:100ms,KILL --report json -- ./server
  childguard demo

See `childguard run --help` for the flags and exit codes.
";

/// `childguard run --help`.
pub const RUN: &str = "\
Usage: childguard run [OPTIONS] [--] CMD [ARG...]

Run CMD (it shares childguard's stdin, stdout and stderr) and wait for it, like timeout(1).
On a trigger, climb the ladder: send each rung's signal, then wait up to its grace for CMD
to exit; the next rung comes only if the grace ran out. Then reap CMD and exit with its status.

Triggers:
  --timeout expiry; a signal sent to childguard (see Signals); stdin closing
  (with --stop-on-stdin-eof or --stdio-server); the parent exiting (with --stdio-server).
  Without a trigger childguard just waits for CMD.

Options:
  --ladder SPEC         rungs, e.g. HUP:1s,TERM:2s,KILL:5s (the default; or $CHILDGUARD_LADDER).
                        SIGNAL:GRACE items, names with or without SIG, or numbers; a rung
                        without GRACE waits 1s. An optional leading EOF:DUR waits DUR
                        before the first signal. Or a preset: @postgres (INT:10s,QUIT:5s,
                        KILL:5s), @nginx (QUIT:10s,TERM:2s,KILL:5s), @redis (TERM:20s,KILL:5s),
                        @memcached, @nbdkit, @qemu-nbd, @mcp (EOF:2s,TERM:2s,KILL:5s), @default.
  --no-skip-ignored     send every rung as written; by default a rung whose signal CMD
                        ignores (SigIgn, Linux) is skipped at once, its grace not spent
                        (also: NOSKIP, first in --ladder)
  --timeout DUR         start the ladder after DUR (200ms, 1.5s, 2m, 5 = seconds; 0 = never)
  --group               run CMD in a new process group and signal the whole group on every
                        rung (group members still alive when CMD exits get the ladder too)
  --contain[=BACKEND]   hold CMD's whole tree (Linux): KILL reaches every process CMD
                        started, setsid'd or daemonized, and the run ends when none is left.
                        Alone: the best backend that works here, in this order: cgroup (a
                        cgroup v2 of its own; needs a writable one: root, or a delegated
                        subtree), pid-namespace (CMD is pid 2 of a new PID namespace, in a
                        user namespace of your own ids without root), subreaper (childguard's
                        tree init adopts every orphan); exit 125 naming each if none works.
                        --contain=cgroup|pid-namespace|subreaper asks for one (exit 125 if it
                        cannot be had); --contain=best-effort falls back to a process group.
                        --report names the backend and why better ones were passed over.
                        A container launch (docker|podman|nerdctl [..] run ..., also after
                        env or in a plain sh -c string) is held by its engine instead: the
                        rungs become ENGINE kill --signal SIG NAME (--name added after run
                        unless given), the run ends when the container is gone
  --container ENGINE    CMD launches a container with ENGINE in a way childguard cannot read
                        (a script): CMD gets CHILDGUARD_CONTAINER_NAME and must pass it to
                        run --name; the rungs then go to that container as above
  --restart on-failure|always
                        start CMD again when it exits (on-failure: a non-zero exit or a
                        signal), until a trigger; --restart-delay DUR[..MAX] (default
                        100ms..5s, doubling), --restart-limit N/DUR (default 5/60s: then
                        give up, exit 125, naming the last exits)
  --memory-max SIZE     limits on CMD's cgroup, in systemd's spelling (need the cgroup):
  --memory-high SIZE      512M, 2G, infinity; a count; a percentage of one CPU (50%, 200%).
  --tasks-max N           cgroup v2, or the v1 hierarchies of a hybrid host; one that cannot
  --cpu-quota PCT%        be applied is exit 125. A CMD the kernel's OOM killer ended is
                          named on stderr (oom-kill, the limit and the peak usage)
  --exit-with-parent    the kernel SIGKILLs CMD if childguard dies, even by SIGKILL (Linux)
  --no-exit-with-parent  by default (Linux) the kernel sends CMD the ladder's first signal
                        if childguard dies, even by SIGKILL; this turns that off
  --on-signal forward|ladder
                        a signal sent to childguard: forward it as the first rung (default),
                        or climb the ladder as written
  --activate[=NAME]     systemd socket activation: pass CMD a listening socket as fd 3
                        (LISTEN_FDS=1, LISTEN_FDNAMES=NAME), print its path on stdout first
  --stop-on-stdin-eof   start the ladder when childguard's stdin closes; childguard reads
                        (and discards) its stdin itself, CMD gets /dev/null
  --stdio-server        CMD is the stdio server (MCP, LSP) of the program that started
                        childguard: CMD keeps childguard's stdin and stdout untouched, and the
                        ladder starts when that host closes childguard's stdin (watched, not
                        read) or exits (childguard's parent, Linux)
  --report text|json    write the close report (signals sent, when, how CMD ended) to stderr
  --preserve-status     exit with CMD's status even when the timeout fired
  -h, --help            print this help
  -V, --version         print the version

Signals:
  A SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 (or any signal the ladder names) sent
  to childguard is forwarded to CMD in place of the first rung's signal (with that rung's
  grace); the ladder then goes on from the second rung. Any other signal that would end
  childguard (ALRM, XCPU, real-time ...) climbs the ladder as written. Another signal while the
  ladder runs cuts the current rung short: a second Ctrl-C skips ahead. A rung 0:DUR sends
  nothing and only waits.
  A terminal's Ctrl-C (or Ctrl-\\, or hangup) reaches a CMD in childguard's process group (no
  --group) by itself: it is not sent again, and the first rung becomes 0 (waits its grace).

Exit status:
  124  the timeout fired (unless --preserve-status)
  125  childguard itself failed (bad usage, or an error while supervising)
  126  CMD was found but could not be run
  127  CMD was not found
  128+N  CMD died of signal N (137 after KILL)
  else CMD's exit status

Examples:
  childguard run --timeout 30s -- make test
      timeout(1) with the default ladder: HUP, 1s later TERM, 2s later KILL
  childguard run --timeout 200ms --ladder HUP:100ms,KILL --report json -- ./server
      exits 124 after ~300ms; the JSON report shows HUP, then KILL (or HUP skipped, KILL
      at once, for a server that ignores HUP)
  childguard run --group --ladder TERM:5s,KILL -- ./start-workers.sh
      Ctrl-C: INT (forwarded in TERM's place) to the whole group; again: KILL at once
  my-harness | childguard run --stop-on-stdin-eof -- nbdkit -f memory 1G
      the server goes away when the harness does, however it dies
  childguard run --stdio-server --contain --ladder EOF:1s,TERM:500ms,KILL:1s \\
      -- npx -y @modelcontextprotocol/server-everything
      an MCP host's server command: its close or its death ends the whole tree
";

/// `childguard demo --help`.
pub const DEMO: &str = "\
Usage: childguard demo

Spawns a slow server (built into this binary) over a socketpair, has it start a read that
takes 10 s, then closes it with the default ladder HUP:1s,TERM:2s,KILL:5s and prints the
close report: shutdown, signals, exit and reap times. It also prints what a waitpid-only
close (what libnbd's nbd_close does) would have cost: the time the read still had left — an
estimate, the demo does not wait for it.
";

/// `childguard timeout --help` (and `timeout --help` under that name).
pub const TIMEOUT: &str = "\
Usage: timeout [OPTION] DURATION COMMAND [ARG]...
  or:  childguard timeout [OPTION] DURATION COMMAND [ARG]...

GNU timeout(1)'s command line on childguard's close path: start COMMAND, and kill it if it
is still running after DURATION. Run as `timeout` (ln -s childguard timeout) it is this.

Options:
  -f, --foreground       keep COMMAND in childguard's process group and signal only it
                         (default: COMMAND leads a new group, which gets every signal)
  -k, --kill-after=DUR   also send KILL if COMMAND is still running DUR after the signal
  -p, --preserve-status  exit with COMMAND's status even when the timeout fired
  -s, --signal=SIG       the signal sent on timeout (default TERM); 0 sends none
  -v, --verbose          say on stderr which signal is sent to COMMAND
      --skip-ignored     skip the signal (and go on to -k's KILL at once) if COMMAND
                         ignores it (SigIgn, Linux); GNU timeout always sends it and waits
  -h, --help             print this help
  -V, --version          print the version

DURATION is a number (exponents, inf allowed) with an optional unit s (default), m, h or d;
0 disables the timeout. A SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 or the -s signal
sent to timeout is forwarded to COMMAND (then -k's KILL follows); a SIGALRM is the timeout.
As with GNU timeout, that includes a terminal's Ctrl-C, which with --foreground reached
COMMAND already (it gets two).
COMMAND gets the -s signal if timeout dies (PR_SET_PDEATHSIG).

Exit status:
  124  the timeout fired (unless --preserve-status)
  125  timeout itself failed
  126  COMMAND was found but could not be run
  127  COMMAND was not found
  137  COMMAND (or timeout) was sent KILL
  else COMMAND's exit status (128+N if it died of signal N)
";

/// `childguard with --help`.
pub const WITH: &str = "\
Usage: childguard with [--ready COND]... [--ready-timeout DUR] [--ladder SPEC] [--end WORD]
                       -- SERVER [ARG...] [WORD] [--then [OPTIONS] -- SERVER2 [ARG...]]...
                       -- CMD [ARG...]

Start each SERVER, wait until it is ready, run CMD, then close every server with its ladder
(last started first) and exit with CMD's status. A server that exits before it is ready, or
while CMD runs, fails the run at once (exit 125) with the tail of its output.

Options (for the SERVER that follows them):
  --ready COND          notify (READY=1 on NOTIFY_SOCKET), tcp:HOST:PORT or unix:PATH (a
                        connection is accepted), line:TEXT (an output line contains TEXT),
                        http://HOST[:PORT]/PATH or http+unix://%2Fpath%2Fs.sock/PATH (a GET
                        answers 2xx; http:STATUS:URL for exactly STATUS; no https),
                        exec:'CMD ARG...' (the probe exits 0; split into words with ' and
                        \" quotes, no shell: exec:'sh -c \"...\"' for one);
                        without it the server counts as ready once started. Given more than
                        once: ready when every one has held. tcp:, unix: and http: accept
                        whoever listens there first, not only SERVER: on a shared machine
                        prefer notify (only SERVER's tree is heard) or a unix: path in a
                        directory only you can write
  --ready-any COND      (repeatable) ready when the first of these holds, e.g. notify or
                        its port for a server built with or without systemd support
  --ready-timeout DUR   how long to wait for it (default 30s); then it is closed, exit 125
  --watchdog DUR        with --ready notify: the server must send WATCHDOG=1 at least every
                        DUR once ready (it gets WATCHDOG_USEC); a miss or WATCHDOG=trigger
                        closes it with its ladder, which fails the run (exit 125)
  --ladder SPEC         its ladder (default HUP:1s,TERM:2s,KILL:5s; or a preset such as
                        @postgres, @nginx, @redis, as for run)
  --no-skip-ignored     send its every rung, also those it ignores (default: skipped)
  --restart on-failure|always [--restart-delay DUR[..MAX]] [--restart-limit N/DUR]
                        restart the server when it exits while CMD runs, as for run; the run
                        ends (125) only once it gives up (naming the last exits)
  --memory-max SIZE, --memory-high SIZE, --tasks-max N, --cpu-quota PCT%
                        limits on the server's cgroup (it is then contained), as for run;
                        a server the OOM killer ended is named (oom-kill)
  --end WORD            its arguments end at WORD, not at the first -- or --then: for a
                        server whose own arguments contain them. After WORD comes -- CMD or
                        --then, as usual: -- runuser -u pg -- postgres -D data END -- CMD.
                        (A word you name, like find -exec's `;`: nothing to count, nothing
                        quoted twice, and lines without --end mean what they did.)
  -h, --help            print this help

Each server leads its own process group (its ladder reaches its workers; a terminal's Ctrl-C
does not reach it), gets the parent-death signal, and its output is passed through to stderr
as [program pid] line. Signals childguard receives while CMD runs are forwarded to CMD, but a
terminal's Ctrl-C (Ctrl-\\, hangup) reached CMD by itself and is not sent again: one Ctrl-C,
one SIGINT. A signal while the servers start ends the run (128+N): CMD does not run, and the
servers are closed (the one starting once its readiness wait ends).

Examples:
  childguard with --ready unix:/tmp/r/redis.sock -- redis-server --port 0 \\
      --unixsocket /tmp/r/redis.sock -- redis-cli -s /tmp/r/redis.sock ping
  childguard with --ready tcp:127.0.0.1:5432 --ladder @postgres -- \\
      postgres -D ./data -k /tmp -- pytest tests/
  childguard with --ready exec:'pg_isready -h /tmp' --ladder @postgres -- \\
      postgres -D ./data -k /tmp -- pytest tests/
  childguard with --ready http://127.0.0.1:8000/ -- python3 -m http.server 8000 \\
      --bind 127.0.0.1 -- curl -s http://127.0.0.1:8000/
  childguard with --ready tcp:127.0.0.1:5432 --ladder @postgres --end END -- \\
      runuser -u postgres -- postgres -D ./data -k /tmp END -- pytest tests/
";

/// `childguard init --help` (and `tini -h` when run as `tini`).
pub const INIT: &str = "\
Usage: childguard init [OPTIONS] [--] CMD [ARG...]

A container's PID 1, option for option tini (also run as `tini`, through a symlink): runs
CMD in a process group of its own (owning the terminal, if any), reaps every zombie, forwards
every catchable signal to CMD, and exits with CMD's status (128+N if it died of signal N).
Beyond tini: the first TERM or INT starts CMD's ladder, fitted to the stop budget; once CMD
is gone every process left in the PID namespace (our descendants when not PID 1) gets what
is left of the budget; a second TERM or INT skips to the next rung; a report goes to stderr.

tini's options:
  -s            register as a child subreaper when not PID 1 (or $TINI_SUBREAPER,
                $CHILDGUARD_SUBREAPER); without it and not PID 1, a warning says zombie
                reaping won't work
  -g            send forwarded signals and the rungs to CMD's process group
                (or $TINI_KILL_PROCESS_GROUP)
  -e CODE       exit 0 when CMD exits with CODE (0-255; repeatable)
  -p SIGNAL     our parent-death signal, e.g. SIGKILL
  -w            warn for each zombie reaped
  -v            more messages (repeatable; $TINI_VERBOSITY sets the level, default 1)
  -l            print the license note
  -h, --help    print this help
  --version     print the version

Options beyond tini:
  --ladder SPEC       CMD's ladder on a stop (default TERM:8s,KILL:1s, or $CHILDGUARD_LADDER);
                      its first signal is replaced by the stop signal received
  --stop-budget DUR   the time from the stop signal to the last rung (default 9s, fit for
                      docker stop's 10 s; or $CHILDGUARD_STOP_BUDGET): the graces before the
                      last rung are scaled by one factor, never up, to fit
  --ready COND --ready-file PATH
                      PATH exists once COND holds (tcp:HOST:PORT, unix:PATH, http:URL,
                      exec:CMD, checked every 50 ms; repeated: all of them); removed at
                      the stop, before CMD's first signal
  --no-contain        no cgroup for CMD even where one can be made: the sweep of the PID
                      namespace (our descendants when not PID 1) alone finds what is left

Options are read as getopt reads tini's: clustered, and anywhere before `--` unless
$POSIXLY_CORRECT is set (then CMD starts at the first non-option).

Exit status: CMD's; 1 for a bad option or a failed set-up; 126/127 when CMD cannot run or
is not found.
";

/// `childguard probe --help`.
pub const PROBE: &str = "\
Usage: childguard probe [OPTIONS] [--] SERVER [ARG...]

Measure what each signal does to SERVER and recommend a ladder. For each signal and each run,
SERVER is started fresh (in a cgroup of its own when one can be made; the output says when
not), its readiness awaited, the --client started, then the one signal is sent to SERVER's
main process and its exit awaited for --window. Then it is closed with KILL and checked gone.
Without --ready, each run waits for SERVER to settle first: a listening socket (Unix or TCP)
seen and its signal dispositions (SigIgn/SigCgt) unchanged for 300ms; when --settle-timeout
passes first, the probe goes on and warns that its recommendation may be wrong.

Options:
  --ready COND          readiness, as for `with`: notify, tcp:HOST:PORT, unix:PATH, line:TEXT,
                        http:URL, exec:CMD (more than one: every one must hold)
  --ready-timeout DUR   how long to wait for it (default 30s)
  --settle-timeout DUR  without --ready: the bound of the wait to settle (default 10s)
  --client CMD          a client started once SERVER is ready, left running while the signal
                        is sent (CMD split into words as for exec:)
  --client-ready COND   the client counts as started once COND holds (e.g. exec:… checking
                        that its query runs); without it, the signal follows its spawn
  --signals LIST        the signals probed (default HUP,INT,TERM,QUIT,USR1,USR2)
  --runs N              runs per signal (default 3)
  --window DUR          how long an exit is awaited after the signal (default 10s)
  --user NAME           run SERVER and the client as NAME (e.g. postgres, when root)
  --json                one JSON object; its key recommended_ladder holds the ladder
  -h, --help            print this help

Clean: exited within the window by its own hand (an exit code, or a handler that re-raised the
signal), nothing left in its cgroup, in every run. The ladder: every clean signal, fastest
first, each grace 3x its slowest exit rounded up to whole seconds (at least 2s), then KILL.

Exit status: 0 a clean signal was found; 3 none was (the ladder is KILL alone); 125 the probe
failed (bad usage, SERVER never ready, …).

Example:
  childguard probe --ready unix:/tmp/r.sock -- redis-server --port 0 --unixsocket /tmp/r.sock
";
