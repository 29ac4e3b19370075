/* The child's environment is the one the builder describes plus only its mode's variables:
 * with cg_builder_env_clear a secret of this process (CG_SECRET, set before any cg_ call)
 * does not reach the server, socket-activated or not; without it the server gets this
 * process's environment with cg_builder_env/cg_builder_env_remove applied. The server is
 * cg-env-dump (argv[1]), which writes its environment to a file before it accepts on fd 3 or
 * sends READY=1, so the file is whole when cg_spawn returns. */
#include "check.h"

#include <stdbool.h>

extern char **environ;

#define MAX_VARS 512

static int compare(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Under valgrind our LD_PRELOAD holds its preloads, which its execve wrapper strips from
 * the child's: not ours to compare, so LD_PRELOAD is left out of both sides. */
static bool valgrind_preload(const char *entry) {
    return strncmp(entry, "LD_PRELOAD=", 11) == 0;
}

/* The file's NUL-separated entries (NOTIFY_SOCKET's path replaced by `*`), sorted, into
 * `vars` (pointing into `buf`). */
static size_t read_dump(const char *file, char *buf, size_t size, char **vars) {
    FILE *f = fopen(file, "rb");
    CHECK(f != NULL, "no dump %s: %s", file, strerror(errno));
    size_t len = fread(buf, 1, size - 1, f);
    CHECK(len < size - 1, "dump %s too big", file);
    fclose(f);
    buf[len] = '\0';
    size_t n = 0;
    for (size_t at = 0, next; at < len; at = next) {
        CHECK(n < MAX_VARS, "too many variables");
        next = at + strlen(buf + at) + 1; /* before the entry is shortened */
        if (valgrind_preload(buf + at))
            continue;
        if (strncmp(buf + at, "NOTIFY_SOCKET=/", 15) == 0)
            strcpy(buf + at + 14, "*");
        vars[n++] = buf + at;
    }
    qsort(vars, n, sizeof *vars, compare);
    return n;
}

/* Spawns cg-env-dump (socket activation, or no socket with notify readiness), cleared or
 * not, and checks the environment it got. */
static void check_env(const char *dump, bool activation, bool clear) {
    char file[128];
    snprintf(file, sizeof file, "/tmp/cg-c-env-%d-%d%d", (int)getpid(), activation, clear);
    unlink(file);
    const char *argv[] = {dump, file, activation ? NULL : "--notify", NULL};
    cg_builder *b = cg_builder_new(argv);
    CHECK(b != NULL, "cg_builder_new: %s", cg_last_error_message());
    OK(cg_builder_env(b, "CG_GIVEN", "given"));
    if (clear) {
        OK(cg_builder_env_clear(b)); /* after an env call: that one still applies */
        OK(cg_builder_env(b, "PATH", "/usr/bin:/bin"));
    } else {
        OK(cg_builder_env_remove(b, "CG_SECRET"));
    }
    if (activation) {
        OK(cg_builder_socket(b, CG_SOCKET_ACTIVATION, NULL));
    } else {
        OK(cg_builder_ready_notify(b));
        OK(cg_builder_ready_timeout(b, 60000));
    }
    OK(cg_builder_ladder(b, "TERM:10s,KILL:10s"));
    /* A failed CHECK exits at once: the server must not outlive us holding our stdout. */
    OK(cg_builder_exit_with_parent(b, true));
    cg_handle *h = cg_spawn(b);
    CHECK(h != NULL, "cg_spawn: %s", cg_last_error_message());

    static char expected_buf[MAX_VARS][64];
    char *expected[MAX_VARS];
    size_t n = 0;
    if (!clear) {
        for (char **e = environ; *e; e++) {
            if (strncmp(*e, "CG_SECRET=", 10) != 0 && strncmp(*e, "CG_GIVEN=", 9) != 0 &&
                !valgrind_preload(*e) &&
                !(activation && strncmp(*e, "LISTEN_", 7) == 0) &&
                !(!activation && strncmp(*e, "NOTIFY_SOCKET=", 14) == 0)) {
                CHECK(n < MAX_VARS - 8, "too many variables");
                expected[n++] = *e;
            }
        }
    } else {
        expected[n++] = "PATH=/usr/bin:/bin";
    }
    expected[n++] = "CG_GIVEN=given";
    if (activation) {
        expected[n++] = "LISTEN_FDS=1";
        expected[n++] = "LISTEN_FDNAMES=unknown";
        snprintf(expected_buf[0], sizeof expected_buf[0], "LISTEN_PID=%d", (int)cg_pid(h));
        expected[n++] = expected_buf[0];
    } else {
        expected[n++] = "NOTIFY_SOCKET=*";
    }
    qsort(expected, n, sizeof *expected, compare);

    static char buf[1 << 20];
    char *got[MAX_VARS];
    size_t m = read_dump(file, buf, sizeof buf, got);
    for (size_t i = 0; i < m; i++)
        CHECK(strncmp(got[i], "CG_SECRET=", 10) != 0,
              "activation %d, env_clear %d: the secret reached the server", activation, clear);
    for (size_t i = 0; i < m || i < n; i++)
        CHECK(i < m && i < n && strcmp(got[i], expected[i]) == 0,
              "activation %d, env_clear %d: the server's variable #%zu is %s, expected %s "
              "(%zu variables, expected %zu)",
              activation, clear, i, i < m ? got[i] : "(none)", i < n ? expected[i] : "(none)",
              m, n);
    cg_report *report = NULL;
    OK(cg_close(h, &report));
    cg_report_free(report);
    unlink(file);
    char argv_file[160];
    snprintf(argv_file, sizeof argv_file, "%s.argv", file);
    unlink(argv_file);
    printf("activation %d, env_clear %d: %zu variables, as built\n", activation, clear, m);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s PATH-TO-CG-ENV-DUMP\n", argv[0]);
        return 2;
    }
    CHECK(setenv("CG_SECRET", "hunter2", 1) == 0, "setenv: %s", strerror(errno));
    for (int activation = 1; activation >= 0; activation--)
        for (int clear = 1; clear >= 0; clear--)
            check_env(argv[1], activation, clear);
    return 0;
}
