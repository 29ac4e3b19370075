/* A C host whose SIGPIPE is at its default (as every C program's is), with a contained
 * exit_with_parent server, whose guardian is killed by hand (SIGKILL) before cg_close: the
 * close must succeed and the host must live (issue 21: the old per-child /bin/sh guardian's
 * dismissal wrote to a pipe nobody read any more, and SIGPIPE killed the host, exit 141).
 * Then a second spawn gets a new guardian, and its close succeeds too. */
#include "check.h"

#include <signal.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <time.h>

/* Reads a small /proc file of `pid` into `out` (NULs of cmdline turned into spaces). */
static void proc_text(int pid, const char *file, char *out, size_t size) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/%s", pid, file);
    out[0] = '\0';
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return;
    size_t n = fread(out, 1, size - 1, f);
    fclose(f);
    for (size_t i = 0; i < n; i++)
        if (out[i] == '\0')
            out[i] = ' ';
    out[n] = '\0';
}

/* The live guardians of this process: the process named cgguard/<our pid> (one per process),
 * or the old kind, a /bin/sh child of ours running the guardian script. */
static int guardians(int *pids, int max) {
    char want[32];
    snprintf(want, sizeof want, "cgguard/%d", (int)getpid());
    want[15] = '\0';
    DIR *dir = opendir("/proc");
    CHECK(dir != NULL, "opendir /proc: %s", strerror(errno));
    int n = 0;
    struct dirent *e;
    while ((e = readdir(dir)) != NULL && n < max) {
        int pid = atoi(e->d_name);
        if (pid <= 0)
            continue;
        char comm[64], cmdline[4096];
        proc_text(pid, "comm", comm, sizeof comm);
        comm[strcspn(comm, "\n")] = '\0';
        proc_text(pid, "cmdline", cmdline, sizeof cmdline);
        char state = proc_state(pid);
        bool alive = state != 0 && state != 'Z' && state != 'X';
        if (alive && (strcmp(comm, want) == 0 || strstr(cmdline, "childguard-guardian") != NULL))
            pids[n++] = pid;
    }
    closedir(dir);
    return n;
}

static cg_handle *guarded(const char *server) {
    cg_builder *b = slowserver(server, NULL);
    OK(cg_builder_contain(b, CG_CONTAIN_CGROUP));
    OK(cg_builder_exit_with_parent(b, true));
    cg_handle *h = cg_spawn(b);
    CHECK(h != NULL, "contained cg_spawn (needs a writable cgroup v2; CI runs as root): %s",
          cg_last_error_message());
    read_ready(cg_socket_fd(h));
    return h;
}

/* Closes `h`: the close succeeds and removes the cgroup. With `unguarded`, its report's notes
 * must say the guardian was gone. */
static void close_ok(cg_handle *h, const char *what, bool unguarded) {
    cg_report *r = NULL;
    OK(cg_close(h, &r));
    struct stat st;
    CHECK(r->cgroup_path != NULL && r->cgroup_removed && stat(r->cgroup_path, &st) == -1,
          "%s: cgroup not removed: %s", what, r->summary);
    char *json = cg_report_json(r);
    CHECK(json != NULL, "cg_report_json: %s", cg_last_error_message());
    bool noted = strstr(json, "the guardian was gone") != NULL;
    CHECK(noted == unguarded, "%s: the note on the guardian %s: %s", what,
          unguarded ? "is missing" : "is there", json);
    cg_string_free(json);
    printf("%s: closed, cgroup removed%s\n", what, unguarded ? ", unguarded noted" : "");
    cg_report_free(r);
}

int main(int argc, char **argv) {
    const char *server = slowserver_path(argc, argv);
    /* The precondition of the crash: SIGPIPE at its default. */
    CHECK(signal(SIGPIPE, SIG_DFL) != SIG_ERR, "signal: %s", strerror(errno));

    cg_handle *h = guarded(server);
    int pids[64];
    int n = guardians(pids, 64);
    CHECK(n == 1, "%d guardians of this process, not 1", n);
    CHECK(kill(pids[0], SIGKILL) == 0, "kill %d: %s", pids[0], strerror(errno));
    /* Dead: gone, or a zombie (of init, which reaps late; of ours for the old kind). */
    bool dead = false;
    for (int waited_ms = 0; waited_ms < 20000 && !dead; waited_ms += 5) {
        char state = proc_state(pids[0]);
        dead = state == 0 || state == 'Z' || state == 'X';
        if (!dead)
            usleep(5 * 1000);
    }
    CHECK(dead, "guardian %d still alive 20 s after SIGKILL", pids[0]);
    printf("guardian killed by hand\n");
    close_ok(h, "close after the guardian died", true);

    /* The next guarded spawn gets a new guardian. */
    h = guarded(server);
    n = guardians(pids, 64);
    CHECK(n == 1, "%d guardians after the second spawn, not 1", n);
    close_ok(h, "second close", false);
    return 0;
}
