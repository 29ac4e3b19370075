/* Readiness and detach: cg_spawn returns once slowserver sent READY=1 on its private
 * NOTIFY_SOCKET; a server that exits during start-up is CG_ERR_READY with its status; a
 * detached server keeps running on the socket we now own, and childguard's background reaper
 * reaps it when it exits (no zombie). */
#include "check.h"

#include <signal.h>
#include <sys/wait.h>

int main(int argc, char **argv) {
    const char *server = slowserver_path(argc, argv);

    const char *notify[] = {"--notify", NULL};
    cg_builder *b = slowserver(server, notify);
    OK(cg_builder_ready_notify(b));
    OK(cg_builder_ready_timeout(b, 30000));
    OK(cg_builder_capture(b, CG_CAPTURE_STDERR));
    cg_handle *h = cg_spawn(b);
    CHECK(h != NULL, "cg_spawn: %s", cg_last_error_message());
    int pid = cg_pid(h);
    read_ready(cg_socket_fd(h));
    send_text(cg_socket_fd(h), "PING\n");

    int fd = -2;
    OK(cg_detach(h, &fd)); /* h is gone; fd is ours */
    CHECK(fd >= 0, "no socket from the detach");
    char pong[5] = {0};
    size_t got = 0;
    while (got < 5) {
        ssize_t n = read(fd, pong + got, 5 - got);
        CHECK(n > 0 || (n < 0 && errno == EINTR), "reading PONG: %s", n < 0 ? strerror(errno) : "EOF");
        if (n > 0)
            got += (size_t)n;
    }
    CHECK(memcmp(pong, "PONG\n", 5) == 0, "a detached server stopped answering");
    CHECK(kill(pid, 0) == 0, "the detached server %d is gone", pid);
    close(fd); /* EOF: slowserver exits, the background reaper reaps it */
    int waited_ms = 0;
    while (kill(pid, 0) == 0 && waited_ms < 20000) { /* alive or a zombie */
        usleep(10 * 1000);
        waited_ms += 10;
    }
    CHECK(kill(pid, 0) == -1 && errno == ESRCH, "detached server %d not reaped after 20 s", pid);

    const char *exits[] = {"--exit-immediately", "3", NULL};
    b = slowserver(server, exits);
    OK(cg_builder_ready_notify(b));
    h = cg_spawn(b);
    CHECK(h == NULL, "a server that exited during start-up was ready");
    CHECK(cg_last_error_code() == CG_ERR_READY, "code %d: %s", (int)cg_last_error_code(),
          cg_last_error_message());
    printf("%s\n", cg_last_error_message());
    CHECK(strstr(cg_last_error_message(), "3") != NULL, "no exit status in: %s",
          cg_last_error_message());
    CHECK(waitpid(-1, NULL, WNOHANG) == -1 && errno == ECHILD, "a child was left behind");
    return 0;
}
