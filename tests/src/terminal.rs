//! A real pseudo-terminal for the Ctrl-C tests (issue 22, item 6), driven by python3's `pty`
//! module: no mocks. [`at_a_terminal`] runs a command as the session leader of a new pty
//! (`pty.fork`: `setsid`, the pty's slave as its controlling terminal, so the command's
//! process group is the terminal's foreground group, as a shell's job is) and types the
//! terminal's INTR character `^C` (0x03) into the master, so that the tty driver itself sends
//! `SIGINT` to the foreground group.
//!
//! Each `^C` waits for its cue in the terminal's output (the CMD saying it is ready, or that
//! it handled the previous one; a cue must not appear before the `^C`s it follows were
//! handled): never a sleep. Every wait is bounded (120 s); a command still
//! running then is SIGKILLed with its process group and the run says so.

use std::process::Command;

use crate::postgres::find_peer;

/// The driver: `python3 -c DRIVER N CUE... -- ARGV...`. Prints the terminal's output, then a
/// last line `DRIVER sent=K exit=CODE` (or `DRIVER timeout ...`).
const DRIVER: &str = r#"
import os, pty, select, signal, sys, time
n = int(sys.argv[1])
cues = [c.encode() for c in sys.argv[2:2 + n]]
argv = sys.argv[3 + n:]
pid, fd = pty.fork()
if pid == 0:
    try:
        # A clean start whatever started the tests (a background job ignores INT and QUIT,
        # nohup HUP): every signal at its default, none blocked.
        for signo in signal.valid_signals():
            if signo not in (signal.SIGKILL, signal.SIGSTOP):
                try:
                    signal.signal(signo, signal.SIG_DFL)
                except (OSError, ValueError):
                    pass
        signal.pthread_sigmask(signal.SIG_SETMASK, [])
        os.execvp(argv[0], argv)
    finally:
        os._exit(127)
out = b''
sent = 0
status = None
deadline = time.monotonic() + 120
def read():
    global out
    try:
        data = os.read(fd, 65536)
    except OSError:  # EIO: every slave fd closed
        return False
    out += data
    return bool(data)
while True:
    if time.monotonic() > deadline:
        os.killpg(pid, 9)
        os.waitpid(pid, 0)
        sys.stdout.buffer.write(out)
        print(f"\nDRIVER timeout: sent {sent} of {n}, waiting for {cues[sent] if sent < n else 'exit'}")
        sys.exit(0)
    # The child's exit is checked between reads: after it, what is left is drained.
    if status is None:
        p, st = os.waitpid(pid, os.WNOHANG)
        if p:
            status = st
    r, _, _ = select.select([fd], [], [], 0.05)
    if r:
        if not read():
            break
    elif status is not None:
        break
    if sent < n and cues[sent] in out:
        os.write(fd, b'\x03')
        sent += 1
if status is None:
    _, status = os.waitpid(pid, 0)
sys.stdout.buffer.write(out)
print(f"\nDRIVER sent={sent} exit={os.waitstatus_to_exitcode(status)}")
"#;

/// What a run at the terminal gave.
#[derive(Debug)]
pub struct TerminalRun {
    /// Everything the terminal showed (stdout and stderr of the command and its children).
    pub output: String,
    /// How many `^C` were typed.
    pub sent: usize,
    /// The command's exit code (negative: killed by that signal).
    pub exit: i32,
}

/// Runs `argv` at a new pseudo-terminal; types `^C` once for each of `cues`, each once the
/// terminal's output holds that cue. `None` only when python3 is missing and skipping was
/// asked for (`CHILDGUARD_SKIP_PEERS=1`). Panics if the run timed out.
pub fn at_a_terminal(test: &str, argv: &[&str], cues: &[&str]) -> Option<TerminalRun> {
    let candidates = std::env::var_os("PATH")
        .map(|path| {
            std::env::split_paths(&path)
                .map(|dir| dir.join("python3"))
                .collect()
        })
        .unwrap_or_default();
    let python = find_peer(test, "python3", candidates, "apt-get install -y python3")?;
    let output = Command::new(python)
        .arg("-c")
        .arg(DRIVER)
        .arg(cues.len().to_string())
        .args(cues)
        .arg("--")
        .args(argv)
        .output()
        .expect("running the python3 pty driver");
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "pty driver failed: {stderr}\n{text}"
    );
    let last = text.lines().last().unwrap_or_default();
    assert!(
        !last.starts_with("DRIVER timeout"),
        "{test}: the run at the terminal did not finish: {last}\n{text}"
    );
    let field = |key: &str| -> i32 {
        last.split_whitespace()
            .find_map(|w| w.strip_prefix(key))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {key} in the driver's last line: {text}"))
    };
    Some(TerminalRun {
        sent: field("sent=") as usize,
        exit: field("exit="),
        output: text,
    })
}
