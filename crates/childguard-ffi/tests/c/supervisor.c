/* Restarts from C: a server that crashes once is started again from the same builder, with a
 * socket of its own, and the close leaves nothing; a crash loop ends in CG_ERR_CRASH_LOOP
 * naming the exits; a bad policy is an error naming it. */
#include "check.h"


/* Counts its starts in $1, says "start N" on its socket, exits 3 on "crash". */
static const char *COUNTED =
    "n=$(($(cat \"$1\" 2>/dev/null || echo 0) + 1)); echo $n > \"$1\"; echo \"start $n\"; "
    "read w; [ \"$w\" = crash ] && exit 3; exec sleep 1000";

/* Whether `pid` runs: it exists and is not a zombie (never kill(pid, 0)). */
static int alive(int pid) {
    char state = proc_state(pid);
    return state != 0 && state != 'Z';
}

static int greeting(cg_supervisor *s) {
    int fd = cg_supervisor_socket_dup(s);
    CHECK(fd >= 0, "socket_dup: %s", cg_last_error_message());
    char line[64];
    size_t n = 0;
    while (n + 1 < sizeof line) {
        ssize_t got = read(fd, line + n, 1);
        CHECK(got == 1, "reading the greeting");
        if (line[n++] == '\n')
            break;
    }
    line[n] = '\0';
    close(fd);
    int start = 0;
    CHECK(sscanf(line, "start %d", &start) == 1, "greeting %s", line);
    return start;
}

int main(int argc, char **argv) {
    (void)slowserver_path(argc, argv);
    char counter[64];
    snprintf(counter, sizeof counter, "/tmp/cg-c-supervisor-%d", (int)getpid());
    unlink(counter);

    const char *sh[] = {"sh", "-c", COUNTED, "sh", counter, NULL};
    cg_builder *b = cg_builder_new(sh);
    CHECK(b != NULL, "cg_builder_new: %s", cg_last_error_message());
    OK(cg_builder_socket(b, CG_SOCKET_STDIO, NULL));
    cg_supervisor *s = cg_supervisor_start(b, CG_RESTART_ON_FAILURE, 10, 50, 5, 60000);
    CHECK(s != NULL, "cg_supervisor_start: %s", cg_last_error_message());
    CHECK(greeting(s) == 1, "first start");
    int first = cg_supervisor_pid(s);
    int fd = cg_supervisor_socket_dup(s);
    CHECK(write(fd, "crash\n", 6) == 6, "write");
    close(fd);
    uint64_t generation = 0;
    OK(cg_supervisor_wait_start(s, 1, 30000, &generation));
    CHECK(generation == 2 && cg_supervisor_restarts(s) == 1, "generation %llu",
          (unsigned long long)generation);
    CHECK(greeting(s) == 2, "the second start has a socket of its own");
    int second = cg_supervisor_pid(s);
    CHECK(second > 0 && second != first, "pids %d %d", first, second);
    cg_report *last = NULL;
    OK(cg_supervisor_close(s, &last));
    CHECK(last != NULL, "no report of the running start");
    printf("%s\n", last->summary);
    cg_report_free(last);
    CHECK(!alive(second) && !alive(first), "a start is left: %d %d", first, second);
    printf("restarted once, closed\n");

    /* A crash loop: every start exits 7. */
    const char *bad[] = {"sh", "-c", "exit 7", NULL};
    b = cg_builder_new(bad);
    s = cg_supervisor_start(b, CG_RESTART_ALWAYS, 0, 0, 3, 60000);
    CHECK(s != NULL, "cg_supervisor_start: %s", cg_last_error_message());
    enum cg_status st = CG_OK;
    for (uint64_t after = 0; st == CG_OK;)
        st = cg_supervisor_wait_start(s, after, 30000, &after);
    CHECK(st == CG_ERR_CRASH_LOOP, "status %d: %s", (int)st, cg_last_error_message());
    CHECK(strstr(cg_last_error_message(), "exit 7") != NULL, "%s", cg_last_error_message());
    printf("crash loop: %s\n", cg_last_error_message());
    OK(cg_supervisor_close(s, NULL));

    /* Bad input. */
    b = cg_builder_new(bad);
    CHECK(cg_supervisor_start(b, 9, 0, 0, 1, 1) == NULL, "policy 9 accepted");
    CHECK(cg_last_error_code() == CG_ERR_INVALID_ARGUMENT, "code %d", (int)cg_last_error_code());
    printf("bad policy: %s\n", cg_last_error_message());
    unlink(counter);
    return 0;
}
