/* Resource limits from C: a 64 MiB memory limit set with cg_builder_limit ends a hog in
 * oom-kill, which the report says (oom_kill, oom_kills, memory_peak, limits, summary); a task
 * limit is reported; bad names and values are errors naming them; limits without containment
 * fail cg_spawn with CG_ERR_CONFIG. Needs a writable cgroup with the memory and pids
 * controllers, in v2 or v1 (CI runs as root on a hybrid host), and python3. */
#include "check.h"

#include <signal.h>


static cg_builder *python(const char *script) {
    const char *argv[] = {"python3", "-c", script, NULL};
    cg_builder *b = cg_builder_new(argv);
    CHECK(b != NULL, "cg_builder_new: %s", cg_last_error_message());
    return b;
}

int main(int argc, char **argv) {
    (void)slowserver_path(argc, argv);

    /* Bad input, refused at once with the name or value and why. */
    cg_builder *bad = python("pass");
    EXPECT_ERROR(cg_builder_limit(bad, "swap-max", "1G"), CG_ERR_INVALID_ARGUMENT,
                 "no such limit");
    EXPECT_ERROR(cg_builder_limit(bad, "memory-max", "12Q"), CG_ERR_INVALID_ARGUMENT,
                 "memory-max=12Q: unknown suffix");
    EXPECT_ERROR(cg_builder_limit(bad, "cpu-quota", "50"), CG_ERR_INVALID_ARGUMENT,
                 "percentage");
    EXPECT_ERROR(cg_builder_limit(bad, NULL, "1"), CG_ERR_NULL_ARGUMENT, "name");
    /* Limits without containment: the spawn is refused. */
    OK(cg_builder_limit(bad, "tasks-max", "10"));
    CHECK(cg_spawn(bad) == NULL, "limits without containment spawned");
    CHECK(cg_last_error_code() == CG_ERR_CONFIG, "code %d: %s", (int)cg_last_error_code(),
          cg_last_error_message());
    printf("no containment: %s\n", cg_last_error_message());

    /* The hog: 512 MiB touched under a 64 MiB limit. */
    cg_builder *b = python("x = b'a' * (512 << 20)");
    OK(cg_builder_contain(b, CG_CONTAIN_CGROUP));
    OK(cg_builder_limit(b, "memory-max", "64M"));
    OK(cg_builder_limit(b, "TasksMax", "50"));
    cg_handle *h = cg_spawn(b);
    CHECK(h != NULL, "contained cg_spawn with limits: %s", cg_last_error_message());
    int status = 0;
    OK(cg_wait_timeout(h, 60000, &status));
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "status %d", status);
    cg_report *r = NULL;
    OK(cg_close(h, &r));
    printf("%s\n", r->summary);
    CHECK(r->oom_kill, "oom_kill not set: %s", r->summary);
    CHECK(r->oom_kills >= 1, "oom_kills %llu", (unsigned long long)r->oom_kills);
    CHECK(r->memory_peak > (32u << 20) && r->memory_peak <= (64u << 20), "peak %llu",
          (unsigned long long)r->memory_peak);
    CHECK(r->limits != NULL && strcmp(r->limits, "MemoryMax=64M TasksMax=50") == 0, "limits %s",
          r->limits ? r->limits : "(null)");
    CHECK(strstr(r->summary, "oom-kill") != NULL, "summary %s", r->summary);
    CHECK(r->cgroup_removed, "cgroup not removed: %s", r->summary);
    printf("hog: oom-kill, peak under 64M, cgroup removed\n");
    cg_report_free(r);
    return 0;
}
