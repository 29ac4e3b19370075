/* cg_try_wait / cg_wait_timeout: whether the child has exited, without closing it. A running
 * slowserver is CG_RUNNING (status untouched, last error unchanged); once it exits, CG_OK with
 * its wait(2) status word (WEXITSTATUS, WTERMSIG); a wait on a server that keeps running times
 * out after its timeout, one on a child that exits returns its status; bad handles are errors
 * naming the call, never crashes. */
#include "check.h"

#include <signal.h>
#include <stdbool.h>
#include <sys/wait.h>
#include <time.h>

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1000.0 + (double)ts.tv_nsec / 1e6;
}

static cg_handle *spawn_sh(const char *script) {
    const char *argv[] = {"sh", "-c", script, NULL};
    cg_builder *b = cg_builder_new(argv);
    CHECK(b != NULL, "cg_builder_new: %s", cg_last_error_message());
    cg_handle *h = cg_spawn(b);
    CHECK(h != NULL, "cg_spawn sh -c '%s': %s", script, cg_last_error_message());
    return h;
}

int main(int argc, char **argv) {
    const char *server = slowserver_path(argc, argv);
    int status = 12345;

    /* Bad input: NULL handles, for both calls (the status is not written). */
    EXPECT_ERROR(cg_try_wait(NULL, &status), CG_ERR_NULL_ARGUMENT, "cg_try_wait: handle is NULL");
    EXPECT_ERROR(cg_wait_timeout(NULL, 10, &status), CG_ERR_NULL_ARGUMENT,
                 "cg_wait_timeout: handle is NULL");
    CHECK(status == 12345, "status written on failure: %d", status);

    /* try_wait: running, then (after EXIT 3) exited with 3, reaped; again: the same status. */
    cg_handle *h = cg_spawn(slowserver(server, NULL));
    CHECK(h != NULL, "cg_spawn: %s", cg_last_error_message());
    int pid = cg_pid(h);
    read_ready(cg_socket_fd(h));
    CHECK(cg_try_wait(h, &status) == CG_RUNNING, "a running server is not CG_RUNNING: %s",
          cg_last_error_message());
    CHECK(status == 12345, "status written while running: %d", status);
    CHECK(cg_last_error_code() == CG_ERR_NULL_ARGUMENT, "CG_RUNNING changed the last error to %d",
          (int)cg_last_error_code());
    CHECK(cg_try_wait(h, NULL) == CG_RUNNING, "NULL status: not CG_RUNNING");

    /* A handle inherited through fork(): the copy may not wait for the parent's child. Its
     * verdict comes back on a pipe, not as its exit code (valgrind's leak check of the forked
     * copy, which holds the other threads' memory, makes that 99). */
    int verdict[2];
    CHECK(pipe(verdict) == 0, "pipe: %s", strerror(errno));
    pid_t forked = fork();
    CHECK(forked >= 0, "fork: %s", strerror(errno));
    if (forked == 0) {
        int st = 12345;
        enum cg_status got = cg_try_wait(h, &st);
        const char *msg = cg_last_error_message();
        char ok = got == CG_ERR_INHERITED && st == 12345 && msg && strstr(msg, "cg_try_wait") &&
                          strstr(msg, "fork()") && cg_wait_timeout(h, 10, &st) == CG_ERR_INHERITED
                      ? 'y'
                      : 'n';
        if (write(verdict[1], &ok, 1) != 1)
            _exit(2);
        _exit(0);
    }
    close(verdict[1]);
    char ok = 0;
    ssize_t got;
    while ((got = read(verdict[0], &ok, 1)) < 0 && errno == EINTR)
        ;
    close(verdict[0]);
    while (waitpid(forked, NULL, 0) < 0)
        CHECK(errno == EINTR, "waitpid %d: %s", (int)forked, strerror(errno));
    CHECK(got == 1 && ok == 'y',
          "in a fork()ed copy cg_try_wait / cg_wait_timeout were not CG_ERR_INHERITED (%c)",
          got == 1 ? ok : '?');
    CHECK(cg_try_wait(h, NULL) == CG_RUNNING, "the fork()ed copy disturbed the server");

    send_text(cg_socket_fd(h), "EXIT 3\n");
    double began = now_ms();
    enum cg_status st;
    while ((st = cg_try_wait(h, &status)) == CG_RUNNING && now_ms() - began < 60000.0)
        usleep(5 * 1000);
    CHECK(st == CG_OK, "cg_try_wait after EXIT 3 gave %d: %s", (int)st, cg_last_error_message());
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 3, "status %#x, not exit 3", status);
    printf("try_wait: exited, WEXITSTATUS %d\n", WEXITSTATUS(status));
    /* Reaped by the call that saw the exit (it leads no group): no zombie is left to us. */
    CHECK(waitpid(pid, NULL, WNOHANG) == -1 && errno == ECHILD, "server %d not reaped", pid);
    status = 0;
    OK(cg_try_wait(h, &status));
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 3, "second try_wait: %#x", status);
    OK(cg_wait_timeout(h, 60000, &status));
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 3, "wait after try_wait: %#x", status);
    cg_report *r = NULL;
    OK(cg_close(h, &r));
    printf("%s\n", r->summary);
    CHECK(r->ended_by == CG_ENDING_BEFORE_CLOSE && r->exit_code == 3, "ended by %d, code %d",
          (int)r->ended_by, r->exit_code);
    cg_report_free(r);

    /* wait_timeout: a server that keeps running times out after the timeout, no sooner. */
    h = cg_spawn(slowserver(server, NULL));
    CHECK(h != NULL, "cg_spawn: %s", cg_last_error_message());
    read_ready(cg_socket_fd(h));
    status = 12345;
    began = now_ms();
    st = cg_wait_timeout(h, 300, &status);
    double took = now_ms() - began;
    CHECK(st == CG_RUNNING, "wait_timeout on a running server gave %d: %s", (int)st,
          cg_last_error_message());
    CHECK(status == 12345, "status written on a timeout: %d", status);
    CHECK(took >= 299.0, "timed out after %.1f ms, before its 300 ms", took);
    printf("wait_timeout: timed out after %.1f ms\n", took);
    CHECK(cg_wait_timeout(h, 0, &status) == CG_RUNNING, "a 0 ms wait is not CG_RUNNING");
    /* A process group leader: the exit is reported, the zombie kept until the close. */
    OK(cg_close(h, NULL));

    cg_builder *b = slowserver(server, NULL);
    OK(cg_builder_process_group(b, true));
    h = cg_spawn(b);
    CHECK(h != NULL, "cg_spawn: %s", cg_last_error_message());
    pid = cg_pid(h);
    read_ready(cg_socket_fd(h));
    send_text(cg_socket_fd(h), "EXIT 5\n");
    OK(cg_wait_timeout(h, 60000, &status));
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 5, "group leader: %#x", status);
    siginfo_t info;
    memset(&info, 0, sizeof info);
    CHECK(waitid(P_PID, (id_t)pid, &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid,
          "the group leader %d was reaped before the close", pid);
    OK(cg_close(h, &r));
    CHECK(r->ended_by == CG_ENDING_BEFORE_CLOSE && r->exit_code == 5, "ended by %d, code %d",
          (int)r->ended_by, r->exit_code);
    cg_report_free(r);
    CHECK(waitpid(pid, NULL, WNOHANG) == -1 && errno == ECHILD, "leader %d left a zombie", pid);

    /* wait_timeout on children that exit by themselves: an exit code, and a signal. */
    h = spawn_sh("exit 7");
    status = 0;
    OK(cg_wait_timeout(h, 60000, &status));
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 7, "sh -c 'exit 7': status %#x", status);
    printf("wait_timeout: sh exited, WEXITSTATUS %d\n", WEXITSTATUS(status));
    OK(cg_close(h, NULL));

    h = spawn_sh("kill -KILL $$");
    status = 0;
    OK(cg_wait_timeout(h, 60000, &status));
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "sh killed by KILL: status %#x",
          status);
    printf("wait_timeout: sh killed, WTERMSIG %d\n", WTERMSIG(status));
    OK(cg_close(h, NULL));

    CHECK(waitpid(-1, NULL, WNOHANG) == -1 && errno == ECHILD, "a child was left behind");
    return 0;
}
