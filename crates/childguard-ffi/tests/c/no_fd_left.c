/* After a close, no fd of the child's is left open in this process: socket, pidfd, capture
 * pipes, notify socket all go. The first spawn starts childguard's process-wide helpers
 * (reaper, SIGCHLD notifier, output drain: each keeps an fd for the life of the process), so
 * the count is taken after one warm-up round. A captured pipe is closed by the shared capture
 * thread when it reads EOF, which may be just after cg_close() returned, and the freed handle's
 * child is the background reaper's until it exits: the count is awaited (up to 60 s, a bound
 * on a leak only: 5 s ran out once in the flake hunt beside a bench and a CI run), not raced. */
#include "check.h"

#include <signal.h>
#include <stdbool.h>
#include <sys/wait.h>

static void round_trip(const char *server, bool capture, bool kill_first) {
    const char *flags[] = {"--ignore", "HUP", NULL};
    cg_builder *b = slowserver(server, flags);
    OK(cg_builder_ladder(b, "HUP:100ms,TERM:2s,KILL:2s"));
    OK(cg_builder_process_group(b, true));
    if (capture)
        OK(cg_builder_capture(b, CG_CAPTURE_STDERR));
    cg_handle *h = cg_spawn(b);
    CHECK(h != NULL, "cg_spawn: %s", cg_last_error_message());
    read_ready(cg_socket_fd(h));
    if (kill_first) {
        bool exited = false;
        OK(cg_kill(h, SIGTERM, 20000, &exited));
        CHECK(exited, "slowserver did not exit on TERM within 20 s");
    }
    cg_report *r = NULL;
    OK(cg_close(h, &r));
    CHECK(r->reaped_ms >= 0.0, "not reaped: %s", r->summary);
    CHECK(capture == (r->output_tail != NULL), "output_tail %p with capture %d",
          (const void *)r->output_tail, capture);
    cg_report_free(r);
}

int main(int argc, char **argv) {
    const char *server = slowserver_path(argc, argv);
    round_trip(server, true, false); /* warm-up: starts the process-wide helpers */
    int before = open_fds();
    for (int i = 0; i < 3; i++) {
        round_trip(server, false, false);
        round_trip(server, true, false);
        round_trip(server, true, true);
    }
    /* A handle freed without a report, and a failed spawn, leave nothing either. */
    cg_handle *h = cg_spawn(slowserver(server, NULL));
    CHECK(h != NULL, "cg_spawn: %s", cg_last_error_message());
    read_ready(cg_socket_fd(h));
    cg_handle_free(h);
    const char *missing[] = {"/nonexistent/cg-no-such-program", NULL};
    CHECK(cg_spawn(cg_builder_new(missing)) == NULL, "missing program spawned");
    int after = open_fds();
    for (int waited_ms = 0; after != before && waited_ms < 60000; waited_ms += 10) {
        usleep(10 * 1000);
        after = open_fds();
    }
    printf("fds open: %d before, %d after 11 spawns\n", before, after);
    CHECK(before == after, "%d fds open before, %d after", before, after);
    CHECK(waitpid(-1, NULL, WNOHANG) == -1 && errno == ECHILD, "a child was left unreaped");
    return 0;
}
