/* cg_builder_capture_tail: the report's output tail keeps at most the lines and bytes asked
 * (all of it by default, nothing with 0); cg_builder_parent_death_signal: the server of a
 * process killed by SIGKILL gets the signal asked (SIGTERM, which slowserver logs) instead of
 * the default SIGKILL; bad values are errors naming them. */
#include "check.h"

#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/wait.h>

/* sh writes "line 0" .. "line 19" and "up" to stderr, then sleeps: ready once "up" is read,
 * by which time every line before it is in the tail (the capture thread adds each line to
 * the tail before it checks readiness). */
static const char *tail_of(size_t bytes, size_t lines, bool set, cg_report **out) {
    const char *argv[] = {"sh", "-c",
                          "i=0; while [ $i -lt 20 ]; do echo \"line $i\" >&2; i=$((i+1)); done; "
                          "echo up >&2; exec sleep 600",
                          NULL};
    cg_builder *b = cg_builder_new(argv);
    CHECK(b != NULL, "cg_builder_new: %s", cg_last_error_message());
    OK(cg_builder_capture(b, CG_CAPTURE_STDERR));
    if (set)
        OK(cg_builder_capture_tail(b, bytes, lines));
    OK(cg_builder_ready_output(b, "up"));
    OK(cg_builder_ready_timeout(b, 60000));
    OK(cg_builder_ladder(b, "TERM:10s,KILL:10s"));
    cg_handle *h = cg_spawn(b);
    CHECK(h != NULL, "cg_spawn: %s", cg_last_error_message());
    OK(cg_close(h, out));
    return (*out)->output_tail ? (*out)->output_tail : "";
}

static int count_lines(const char *s) {
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

static bool ends_with(const char *s, const char *end) {
    size_t a = strlen(s), b = strlen(end);
    return a >= b && strcmp(s + a - b, end) == 0;
}

/* A server spawned with exit_with_parent and `signo` by a process we then SIGKILL: returns
 * what its --log recorded once it is gone (up to 20 s). Done in a forked process that has not
 * used childguard before (it is a fresh copy of this one, taken before any cg_ call). */
static void death_signal_logged(const char *server, int signo, const char *log, char *got,
                                size_t size) {
    unlink(log);
    int ready[2];
    CHECK(pipe(ready) == 0, "pipe: %s", strerror(errno));
    pid_t middle = fork();
    CHECK(middle >= 0, "fork: %s", strerror(errno));
    if (middle == 0) {
        close(ready[0]);
        const char *flags[] = {"--log", log, "--ignore-eof", NULL};
        cg_builder *b = slowserver(server, flags);
        OK(cg_builder_exit_with_parent(b, true));
        OK(cg_builder_parent_death_signal(b, signo));
        cg_handle *h = cg_spawn(b);
        CHECK(h != NULL, "cg_spawn: %s", cg_last_error_message());
        read_ready(cg_socket_fd(h));
        int pid = cg_pid(h);
        if (write(ready[1], &pid, sizeof pid) != (ssize_t)sizeof pid)
            _exit(2);
        for (;;)
            pause(); /* until our parent's SIGKILL */
    }
    close(ready[1]);
    int pid = 0;
    ssize_t n;
    while ((n = read(ready[0], &pid, sizeof pid)) < 0 && errno == EINTR)
        ;
    close(ready[0]);
    CHECK(n == (ssize_t)sizeof pid && pid > 0, "the middle process spawned no server");
    CHECK(kill(middle, SIGKILL) == 0, "kill: %s", strerror(errno));
    while (waitpid(middle, NULL, 0) < 0)
        CHECK(errno == EINTR, "waitpid: %s", strerror(errno));
    /* The server is an orphan now: gone (no /proc entry, or a zombie) within 20 s. */
    bool gone = false;
    for (int waited_ms = 0; waited_ms < 20000 && !gone; waited_ms += 10) {
        char path[64], buf[512];
        snprintf(path, sizeof path, "/proc/%d/stat", pid);
        int fd = open(path, O_RDONLY);
        if (fd < 0) {
            gone = true;
            break;
        }
        ssize_t len = read(fd, buf, sizeof buf - 1);
        close(fd);
        buf[len > 0 ? len : 0] = '\0';
        char *p = strrchr(buf, ')');
        gone = p == NULL || p[2] == 'Z' || p[2] == 'X';
        if (!gone)
            usleep(10 * 1000);
    }
    CHECK(gone, "server %d outlived its parent by 20 s", pid);
    got[0] = '\0';
    FILE *f = fopen(log, "r");
    if (f != NULL) {
        size_t len = fread(got, 1, size - 1, f);
        got[len] = '\0';
        fclose(f);
    }
    unlink(log);
}

int main(int argc, char **argv) {
    const char *server = slowserver_path(argc, argv);

    /* First, before this process uses childguard: the parent-death signal. */
    char log[128], got[256];
    snprintf(log, sizeof log, "/tmp/cg-ffi-death-%d.log", (int)getpid());
    death_signal_logged(server, SIGTERM, log, got, sizeof got);
    CHECK(strstr(got, "TERM") != NULL, "the orphaned server's log has no TERM: \"%s\"", got);
    printf("parent_death_signal: the orphan got TERM\n");

    cg_report *r = NULL;
    const char *tail = tail_of(0, 0, false, &r);
    CHECK(count_lines(tail) == 21 && strncmp(tail, "line 0\n", 7) == 0, "default tail: %s", tail);
    cg_report_free(r);

    tail = tail_of(1 << 16, 3, true, &r);
    CHECK(strcmp(tail, "line 18\nline 19\nup\n") == 0, "3-line tail: \"%s\"", tail);
    printf("capture_tail: 3 lines kept\n");
    cg_report_free(r);

    tail = tail_of(14, 1000, true, &r);
    CHECK(strlen(tail) <= 14 && ends_with(tail, "line 19\nup\n"), "14-byte tail: \"%s\"", tail);
    printf("capture_tail: %zu bytes kept\n", strlen(tail));
    cg_report_free(r);

    tail = tail_of(0, 0, true, &r);
    CHECK(tail[0] == '\0', "a 0 tail kept \"%s\"", tail);
    cg_report_free(r);

    /* Bad input. */
    const char *args[] = {server, NULL};
    cg_builder *b = cg_builder_new(args);
    CHECK(b != NULL, "cg_builder_new: %s", cg_last_error_message());
    CHECK(cg_builder_capture_tail(b, 100, 10) == CG_ERR_CONFIG, "a tail without capture accepted");
    CHECK(strstr(cg_last_error_message(), "cg_builder_capture_tail") &&
              strstr(cg_last_error_message(), "cg_builder_capture first"),
          "%s", cg_last_error_message());
    CHECK(cg_builder_capture_tail(NULL, 1, 1) == CG_ERR_NULL_ARGUMENT, "NULL builder accepted");
    int bad[] = {0, -1, 12345};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char needle[64];
        snprintf(needle, sizeof needle, "cg_builder_parent_death_signal: signo %d ", bad[i]);
        CHECK(cg_builder_parent_death_signal(b, bad[i]) == CG_ERR_INVALID_ARGUMENT,
              "signal %d accepted", bad[i]);
        CHECK(strstr(cg_last_error_message(), needle) != NULL, "%s", cg_last_error_message());
    }
    printf("%s\n", cg_last_error_message());
    CHECK(cg_builder_parent_death_signal(NULL, SIGTERM) == CG_ERR_NULL_ARGUMENT,
          "NULL builder accepted");
    OK(cg_builder_parent_death_signal(b, SIGHUP));
    cg_builder_free(b);
    CHECK(waitpid(-1, NULL, WNOHANG) == -1 && errno == ECHILD, "a child was left behind");
    return 0;
}
