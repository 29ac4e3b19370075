/* cg_cancel: a flag that interrupts childguard's waits, set here from a SIGUSR1 handler (the
 * async-signal-safe path a C host's SIGINT handler takes).
 *
 * - spawn: a server that never becomes ready (ready_timeout 120 s) is interrupted once it has
 *   started: cg_spawn returns NULL with CG_ERR_INTERRUPTED long before its timeout, and the
 *   server is closed in the background (its TERM rung) and reaped: gone from /proc.
 * - wait: a set flag ends cg_wait_timeout_cancel (60 s) with CG_ERR_INTERRUPTED; the server
 *   is still running, and the handle still works.
 * - close: a TERM-ignoring server's close is interrupted: CG_ERR_INTERRUPTED with a report
 *   saying it went to the reaper, which KILLs it at the next rung and reaps it.
 * - bad input: NULL builder or cancel are errors naming the argument; NULL cancels are no-ops
 *   for set/reset/free and mean "not cancellable" for the waits. */
#include "check.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

static cg_cancel *cancel;

static void on_usr1(int signo) {
    (void)signo;
    cg_cancel_set(cancel); /* async-signal-safe: one atomic store */
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void pause_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* The process `pid` (our child) ends and is reaped within `seconds`: no /proc entry left. */
static void assert_gone(int pid, double seconds, const char *what) {
    double deadline = now_s() + seconds;
    while (proc_state(pid) != 0) {
        CHECK(now_s() < deadline, "%s: server %d still there (state %c)", what, pid,
              proc_state(pid));
        pause_ms(5);
    }
}

/* Reads a pid written (with a trailing newline) to `path`; 0 until it is complete. */
static int read_pid(const char *path) {
    char text[32] = {0};
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, text, sizeof text - 1);
    close(fd);
    if (n <= 0 || text[n - 1] != '\n')
        return 0;
    return atoi(text);
}

int main(int argc, char **argv) {
    const char *server = slowserver_path(argc, argv);

    /* Bad input. */
    cg_cancel_set(NULL);
    cg_cancel_reset(NULL);
    cg_cancel_free(NULL);
    cancel = cg_cancel_new();
    CHECK(cancel != NULL, "cg_cancel_new: NULL");
    CHECK(cg_builder_cancel(NULL, cancel) == CG_ERR_NULL_ARGUMENT, "NULL builder accepted");
    CHECK(strstr(cg_last_error_message(), "cg_builder_cancel: builder is NULL") != NULL, "%s",
          cg_last_error_message());

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1; /* no SA_RESTART: the signal interrupts the wait's poll */
    sigemptyset(&sa.sa_mask);
    CHECK(sigaction(SIGUSR1, &sa, NULL) == 0, "sigaction: %s", strerror(errno));

    /* 1. spawn, interrupted during its readiness wait. A helper process waits for the server's
     * pid file (the server runs: the spawn is past its fork), then sends us SIGUSR1. */
    char pidfile[] = "/tmp/cg-cancel-XXXXXX";
    int tmp = mkstemp(pidfile);
    CHECK(tmp >= 0, "mkstemp: %s", strerror(errno));
    close(tmp);
    unlink(pidfile);
    pid_t helper = fork();
    CHECK(helper >= 0, "fork: %s", strerror(errno));
    if (helper == 0) {
        double deadline = now_s() + 30;
        while (read_pid(pidfile) == 0 && now_s() < deadline)
            pause_ms(2);
        kill(getppid(), SIGUSR1);
        _exit(0);
    }
    char script[256];
    snprintf(script, sizeof script, "echo $$ > %s.tmp && mv %s.tmp %s && exec sleep 1000",
             pidfile, pidfile, pidfile);
    const char *sh[] = {"sh", "-c", script, NULL};
    cg_builder *b = cg_builder_new(sh);
    CHECK(b != NULL, "cg_builder_new: %s", cg_last_error_message());
    OK(cg_builder_ladder(b, "TERM:2s,KILL:5s"));
    OK(cg_builder_ready_output(b, "never printed"));
    OK(cg_builder_ready_timeout(b, 120000));
    OK(cg_builder_cancel(b, cancel));
    double began = now_s();
    cg_handle *h = cg_spawn(b);
    double took = now_s() - began;
    CHECK(h == NULL, "the spawn was not interrupted");
    CHECK(cg_last_error_code() == CG_ERR_INTERRUPTED, "spawn: code %d: %s",
          (int)cg_last_error_code(), cg_last_error_message());
    printf("spawn: %s (after %.3f s)\n", cg_last_error_message(), took);
    CHECK(took < 60, "the interrupted spawn took %.1f s", took);
    int status;
    CHECK(waitpid(helper, &status, 0) == helper, "waitpid helper: %s", strerror(errno));
    int pid = read_pid(pidfile);
    CHECK(pid > 0, "no pid in %s", pidfile);
    assert_gone(pid, 30, "interrupted spawn");
    printf("spawn: server gone\n");
    unlink(pidfile);
    cg_cancel_reset(cancel);

    /* 2. wait: the flag already set ends the wait at once; the server keeps running. */
    h = cg_spawn(slowserver(server, NULL));
    CHECK(h != NULL, "cg_spawn: %s", cg_last_error_message());
    read_ready(cg_socket_fd(h));
    int st = 12345;
    CHECK(cg_wait_timeout_cancel(h, 10, NULL, &st) == CG_RUNNING, "NULL cancel: not CG_RUNNING");
    cg_cancel_set(cancel);
    began = now_s();
    enum cg_status got = cg_wait_timeout_cancel(h, 60000, cancel, &st);
    took = now_s() - began;
    CHECK(got == CG_ERR_INTERRUPTED, "wait: %d: %s", (int)got, cg_last_error_message());
    CHECK(strstr(cg_last_error_message(), "cancelled") != NULL, "%s", cg_last_error_message());
    CHECK(st == 12345, "status written on interrupt: %d", st);
    CHECK(took < 30, "the interrupted wait took %.1f s", took);
    CHECK(cg_try_wait(h, &st) == CG_RUNNING, "the server did not keep running");
    printf("wait: %s; server still running\n", cg_last_error_message());
    cg_cancel_reset(cancel);
    CHECK(cg_wait_timeout_cancel(h, 10, cancel, &st) == CG_RUNNING, "reset flag: not running");
    cg_handle_free(h);

    /* 3. close: TERM ignored, TERM:3s then KILL. Interrupted: the reaper sends KILL at 3 s. */
    const char *flags[] = {"--ignore", "TERM", "--ignore-eof", NULL};
    b = slowserver(server, flags);
    OK(cg_builder_ladder(b, "TERM:3s,KILL:10s"));
    h = cg_spawn(b);
    CHECK(h != NULL, "cg_spawn: %s", cg_last_error_message());
    pid = cg_pid(h);
    read_ready(cg_socket_fd(h));
    cg_cancel_set(cancel);
    cg_report *report = NULL;
    began = now_s();
    got = cg_close_cancel(h, cancel, &report);
    took = now_s() - began;
    CHECK(got == CG_ERR_INTERRUPTED, "close: %d: %s", (int)got, cg_last_error_message());
    CHECK(took < 2.5, "the interrupted close waited %.1f s (its TERM grace is 3 s)", took);
    CHECK(report != NULL, "no report with the interrupted close");
    CHECK(report->handed_to_reaper, "the report does not say the reaper has it");
    printf("close: %s; handed to the reaper\n", cg_last_error_message());
    cg_report_free(report);
    assert_gone(pid, 30, "interrupted close");
    printf("close: server gone\n");

    cg_cancel_free(cancel);
    return 0;
}
