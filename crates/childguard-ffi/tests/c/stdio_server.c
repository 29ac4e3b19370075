/* cg_builder_new_stdio_server: the stdio-server defaults every face shares (issue 52 item 2).
 * 1. exit_with_parent on: a host that spawned a server with the defaults is SIGKILLed; the
 *    server is gone within 2 s.
 * 2. a server behind `sh -c`: a line echoed through the socketpair; its stderr line passed on
 *    to our stderr (`[sh PID] …`) and kept in the report's tail; the close ends it at the EOF.
 * 3. cg_builder_passthrough(b, false): the tail only, nothing on our stderr.
 * 4. NULL arguments are errors, not crashes. */
#include "check.h"

#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/wait.h>
#include <time.h>

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static bool gone(int pid) {
    char state = proc_state(pid);
    return state == 0 || state == 'Z';
}

/* Runs `sh -c 'echo LINE >&2; exec cat'` with the stdio-server defaults (passthrough as
 * given), our stderr sent to a file meanwhile; echoes a line, closes. Returns the report and
 * puts what reached our stderr in `err`. */
static cg_report *run_cat(bool passthrough, char *err, size_t err_size) {
    char path[] = "/tmp/cg-stdio-server-XXXXXX";
    int file = mkstemp(path);
    CHECK(file >= 0, "mkstemp: %s", strerror(errno));
    fflush(stderr);
    int saved = dup(2);
    CHECK(saved >= 0 && dup2(file, 2) == 2, "redirecting stderr: %s", strerror(errno));

    const char *argv[] = {"sh", "-c", "echo 'a server log line' >&2; exec cat", NULL};
    cg_builder *b = cg_builder_new_stdio_server(argv);
    CHECK(b != NULL, "cg_builder_new_stdio_server: %s", cg_last_error_message());
    if (!passthrough)
        OK(cg_builder_passthrough(b, false));
    cg_handle *h = cg_spawn(b);
    CHECK(h != NULL, "cg_spawn: %s", cg_last_error_message());
    int fd = cg_socket_fd(h);
    CHECK(fd >= 0, "no socket");
    send_text(fd, "ping\n");
    char echoed[16];
    read_line(fd, echoed, sizeof echoed, "the echo");
    CHECK(strcmp(echoed, "ping\n") == 0, "echoed %s", echoed);
    cg_report *r = NULL;
    OK(cg_close(h, &r));

    fflush(stderr);
    CHECK(dup2(saved, 2) == 2, "restoring stderr: %s", strerror(errno));
    close(saved);
    ssize_t len = pread(file, err, err_size - 1, 0);
    CHECK(len >= 0, "reading %s: %s", path, strerror(errno));
    err[len] = '\0';
    close(file);
    unlink(path);
    return r;
}

int main(void) {
    /* 1. The host is a child of ours that spawns `sleep 600` with the defaults and tells us
     * the pid; then SIGKILL. */
    int p[2];
    CHECK(pipe(p) == 0, "pipe: %s", strerror(errno));
    pid_t host = fork();
    CHECK(host >= 0, "fork: %s", strerror(errno));
    if (host == 0) {
        close(p[0]);
        const char *argv[] = {"sleep", "600", NULL};
        cg_builder *b = cg_builder_new_stdio_server(argv);
        cg_handle *h = b ? cg_spawn(b) : NULL;
        int pid = h ? cg_pid(h) : -1;
        if (write(p[1], &pid, sizeof pid) != (ssize_t)sizeof pid)
            _exit(3);
        for (;;)
            pause();
    }
    close(p[1]);
    int server = -1;
    CHECK(read(p[0], &server, sizeof server) == (ssize_t)sizeof server, "the host said nothing");
    close(p[0]);
    CHECK(server > 0, "the host could not spawn the server");
    CHECK(!gone(server), "the server %d is not running", server);
    CHECK(kill(host, SIGKILL) == 0, "kill: %s", strerror(errno));
    CHECK(waitpid(host, NULL, 0) == host, "waitpid: %s", strerror(errno));
    double killed = now_s();
    while (!gone(server) && now_s() - killed < 2.0)
        usleep(10000);
    CHECK(gone(server), "the server %d is still running 2 s after its host's SIGKILL", server);
    printf("host SIGKILLed: its server gone\n");

    /* 2. The defaults: passed through and in the tail; ended by the EOF. */
    char err[4096];
    cg_report *r = run_cat(true, err, sizeof err);
    printf("%s\n", r->summary);
    CHECK(r->ended_by == CG_ENDING_EOF, "ended by %d: %s", (int)r->ended_by, r->summary);
    CHECK(r->signals_len == 0, "%zu signals sent", r->signals_len);
    CHECK(r->output_tail && strstr(r->output_tail, "a server log line"), "tail: %s",
          r->output_tail ? r->output_tail : "(none)");
    CHECK(strstr(err, "[sh ") && strstr(err, "] a server log line\n"), "our stderr: %s", err);
    printf("passthrough: on our stderr and in the tail\n");
    cg_report_free(r);

    /* 3. Passthrough off: the tail only. */
    r = run_cat(false, err, sizeof err);
    CHECK(r->output_tail && strstr(r->output_tail, "a server log line"), "tail: %s",
          r->output_tail ? r->output_tail : "(none)");
    CHECK(strstr(err, "a server log line") == NULL, "passed through anyway: %s", err);
    printf("passthrough off: in the tail only\n");
    cg_report_free(r);

    /* 4. NULL arguments. */
    CHECK(cg_builder_new_stdio_server(NULL) == NULL, "a builder from NULL");
    printf("%s\n", cg_last_error_message());
    EXPECT_ERROR(cg_builder_passthrough(NULL, true), CG_ERR_NULL_ARGUMENT, "builder");
    return 0;
}
