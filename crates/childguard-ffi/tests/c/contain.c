/* Containment from C: a contained slowserver whose `--daemonize` daemon (double fork + setsid,
 * out of our process group and session) is gone after cg_close, in both kill modes, with the
 * first rung reaching the server alone (CG_KILL_MODE_MIXED) or the whole cgroup
 * (CG_KILL_MODE_CONTROL_GROUP); the child's cgroup made under cg_builder_cgroup_parent; bad
 * modes and parents are errors naming them. Needs a writable cgroup v2 (CI runs as root); the
 * library finds the mount in /proc/self/mountinfo. */
#include "check.h"

#include <signal.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>

/* Field 22 of /proc/<pid>/stat (start time, in clock ticks) and the state, or false if the
 * process is gone. */
static bool proc_stat(int pid, char *state, unsigned long long *start) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return false;
    char buf[1024];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')'); /* after the command name, which may hold spaces */
    if (p == NULL)
        return false;
    int field = 2;
    *state = p[2];
    for (p += 2; *p && field < 22; p++)
        if (*p == ' ')
            field++;
    return sscanf(p, "%llu", start) == 1;
}

/* Whether `pid` (started at `start`) has died: no such process, a zombie, or the pid reused
 * by a process started later. Waited for up to 20 s (its reaper, not us, reaps it). */
static bool died(int pid, unsigned long long start) {
    for (int waited_ms = 0; waited_ms < 20000; waited_ms += 10) {
        char state;
        unsigned long long now_start;
        if (!proc_stat(pid, &state, &now_start) || now_start != start || state == 'Z' ||
            state == 'X')
            return true;
        usleep(10 * 1000);
    }
    return false;
}

/* Whether `pid` ignores HUP and TERM (its SigIgn in /proc/<pid>/status), waited for up to
 * 20 s: slowserver prints READY before its daemon's exec has set them, and a rung that reached
 * the daemon before would end it (the HUP passed on to those left once the server exits). */
static bool ignores_hup_and_term(int pid) {
    unsigned long long want = (1ULL << (SIGHUP - 1)) | (1ULL << (SIGTERM - 1));
    for (int waited_ms = 0; waited_ms < 20000; waited_ms += 10) {
        char path[64], line[256];
        snprintf(path, sizeof path, "/proc/%d/status", pid);
        FILE *f = fopen(path, "r");
        if (f == NULL)
            return false;
        unsigned long long ign = 0;
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "SigIgn: %llx", &ign) == 1)
                break;
        fclose(f);
        if ((ign & want) == want)
            return true;
        usleep(10 * 1000);
    }
    return false;
}

/* The `0::` line of /proc/<pid>/cgroup (the cgroup v2 path), into `out`. */
static void cgroup_of(int pid, char *out, size_t size) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/cgroup", pid);
    FILE *f = fopen(path, "r");
    CHECK(f != NULL, "%s: %s", path, strerror(errno));
    char line[1024];
    out[0] = '\0';
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "0::", 3) == 0)
            snprintf(out, size, "%s", line + 3);
    fclose(f);
    CHECK(out[0] != '\0', "no cgroup v2 line in %s", path);
}

static cg_handle *contained(const char *server, int mode, const char *parent) {
    const char *flags[] = {"--daemonize", "--ignore-eof", NULL};
    cg_builder *b = slowserver(server, flags);
    OK(cg_builder_ladder(b, "HUP:300ms,TERM:300ms,KILL:10s"));
    OK(cg_builder_contain(b, CG_CONTAIN_CGROUP));
    OK(cg_builder_kill_mode(b, mode));
    if (parent != NULL)
        OK(cg_builder_cgroup_parent(b, parent));
    cg_handle *h = cg_spawn(b);
    CHECK(h != NULL, "contained cg_spawn (needs a writable cgroup v2; CI runs as root): %s",
          cg_last_error_message());
    return h;
}

/* Spawns a contained server with `mode`, closes it; returns the report (the caller frees). */
static cg_report *daemon_dies(const char *server, int mode, const char *parent) {
    cg_handle *h = contained(server, mode, parent);
    char line[256];
    read_ready_line(cg_socket_fd(h), line, sizeof line);
    int pid = 0, daemon = 0;
    CHECK(sscanf(line, "READY pid=%d grandchild=%d", &pid, &daemon) == 2 && daemon > 0,
          "no daemon in %s", line);
    /* Preconditions: the daemon left the server's session (so its process group), not its
     * cgroup. */
    CHECK(getsid(daemon) != getsid(pid), "daemon %d shares the server's session", daemon);
    char server_cg[512], daemon_cg[512];
    cgroup_of(pid, server_cg, sizeof server_cg);
    cgroup_of(daemon, daemon_cg, sizeof daemon_cg);
    CHECK(strcmp(server_cg, daemon_cg) == 0, "daemon in %s, server in %s", daemon_cg, server_cg);
    char state;
    unsigned long long start;
    CHECK(proc_stat(daemon, &state, &start), "daemon %d gone before the close", daemon);
    CHECK(ignores_hup_and_term(daemon), "daemon %d never ignored HUP and TERM", daemon);

    cg_report *r = NULL;
    OK(cg_close(h, &r));
    printf("%s\n", r->summary);
    CHECK(died(daemon, start), "daemon %d outlived the contained close by 20 s: %s", daemon,
          r->summary);
    CHECK(r->cgroup_path != NULL, "no cgroup in the report");
    struct stat st;
    CHECK(r->cgroup_removed && stat(r->cgroup_path, &st) == -1 && errno == ENOENT,
          "cgroup %s not removed", r->cgroup_path);
    CHECK(r->signals_len >= 1, "no signal sent: %s", r->summary);
    return r;
}

int main(int argc, char **argv) {
    const char *server = slowserver_path(argc, argv);

    /* Mixed: HUP reached the server alone (which exits on it), then went on to the daemon left
     * (ignored, as is the TERM after it); KILL the daemon. */
    cg_report *r = daemon_dies(server, CG_KILL_MODE_MIXED, NULL);
    CHECK(r->signals[0].signal == SIGHUP && !r->signals[0].to_cgroup && r->signals[0].reached == 1,
          "mixed: first rung %d to_cgroup %d reached %lld", r->signals[0].signal,
          r->signals[0].to_cgroup, (long long)r->signals[0].reached);
    const cg_sent_signal *kill = NULL;
    for (size_t i = 0; i < r->signals_len; i++)
        if (r->signals[i].signal == SIGKILL)
            kill = &r->signals[i];
    /* At least the daemon (the server too, had a loaded machine kept it from acting on HUP
     * and TERM within their 300 ms). */
    CHECK(kill != NULL && kill->to_cgroup && kill->reached >= 1,
          "mixed: no KILL to the daemon: %s", r->summary);
    printf("mixed: daemon gone, HUP reached 1, KILL reached the cgroup\n");
    /* Our cgroup: the one the library made the child's in. */
    char ours[512];
    snprintf(ours, sizeof ours, "%s", r->cgroup_path);
    char *slash = strrchr(ours, '/');
    CHECK(slash != NULL && strstr(slash, "/childguard-") == slash, "cgroup %s", r->cgroup_path);
    *slash = '\0';
    cg_report_free(r);

    /* Control group: HUP went to the cgroup, reaching both the server and the daemon. The
     * members are signalled through pidfds: where pidfd_open is missing (valgrind 3.19 does
     * not know it) the catchable rungs reach none of them, and only cgroup.kill does. */
    r = daemon_dies(server, CG_KILL_MODE_CONTROL_GROUP, NULL);
    int probe = (int)syscall(SYS_pidfd_open, getpid(), 0);
    bool pidfds = probe >= 0;
    if (pidfds)
        close(probe);
    CHECK(r->signals[0].signal == SIGHUP && r->signals[0].to_cgroup &&
              (!pidfds || r->signals[0].reached == 2),
          "control-group: first rung %d to_cgroup %d reached %lld", r->signals[0].signal,
          r->signals[0].to_cgroup, (long long)r->signals[0].reached);
    char *json = cg_report_json(r);
    CHECK(json != NULL && strstr(json, "\"kill_mode\":\"control_group\"") != NULL, "json: %s",
          json ? json : cg_last_error_message());
    cg_string_free(json);
    printf("control-group: daemon gone, HUP to the cgroup reached %lld%s\n",
           (long long)r->signals[0].reached, pidfds ? "" : " (no pidfd_open)");
    cg_report_free(r);

    /* cgroup_parent: the child's cgroup is made in a directory of ours. */
    char parent[600];
    snprintf(parent, sizeof parent, "%s/cg-ffi-test-%d", ours, (int)getpid());
    CHECK(mkdir(parent, 0755) == 0, "mkdir %s: %s", parent, strerror(errno));
    r = daemon_dies(server, CG_KILL_MODE_MIXED, parent);
    CHECK(strncmp(r->cgroup_path, parent, strlen(parent)) == 0 &&
              r->cgroup_path[strlen(parent)] == '/',
          "cgroup %s not under %s", r->cgroup_path, parent);
    printf("cgroup_parent: made under the given parent\n");
    cg_report_free(r);
    CHECK(rmdir(parent) == 0, "rmdir %s: %s", parent, strerror(errno));

    /* Bad input. */
    const char *args[] = {server, NULL};
    cg_builder *b = cg_builder_new(args);
    CHECK(b != NULL, "cg_builder_new: %s", cg_last_error_message());
    CHECK(cg_builder_kill_mode(b, 7) == CG_ERR_INVALID_ARGUMENT, "kill mode 7 accepted");
    CHECK(strstr(cg_last_error_message(), "cg_builder_kill_mode: mode 7") != NULL, "%s",
          cg_last_error_message());
    CHECK(cg_builder_kill_mode(NULL, CG_KILL_MODE_MIXED) == CG_ERR_NULL_ARGUMENT,
          "NULL builder accepted");
    CHECK(cg_builder_cgroup_parent(b, NULL) == CG_ERR_NULL_ARGUMENT, "NULL path accepted");
    CHECK(strstr(cg_last_error_message(), "path is NULL") != NULL, "%s", cg_last_error_message());
    CHECK(cg_builder_cgroup_parent(b, "my.slice") == CG_ERR_INVALID_ARGUMENT,
          "relative path accepted");
    CHECK(strstr(cg_last_error_message(), "my.slice") != NULL, "%s", cg_last_error_message());
    CHECK(cg_builder_cgroup_parent(b, "") == CG_ERR_INVALID_ARGUMENT, "empty path accepted");
    /* A parent that is no cgroup: the spawn fails naming it, leaving nothing behind. */
    OK(cg_builder_socket(b, CG_SOCKET_STDIO, NULL));
    OK(cg_builder_contain(b, CG_CONTAIN_CGROUP));
    OK(cg_builder_cgroup_parent(b, "/nonexistent-cg-parent"));
    CHECK(cg_spawn(b) == NULL, "a spawn under /nonexistent-cg-parent succeeded");
    CHECK(cg_last_error_code() == CG_ERR_CONTAINMENT, "code %d: %s", (int)cg_last_error_code(),
          cg_last_error_message());
    CHECK(strstr(cg_last_error_message(), "/nonexistent-cg-parent") != NULL, "%s",
          cg_last_error_message());
    printf("%s\n", cg_last_error_message());
    CHECK(waitpid(-1, NULL, WNOHANG) == -1 && errno == ECHILD, "a child was left behind");
    return 0;
}
