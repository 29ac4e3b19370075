/* Spawning a program that does not exist is CG_ERR_SPAWN naming it, and leaves nothing
 * behind (no fd, no child). */
#include "check.h"

#include <sys/wait.h>

static void expect_spawn_error(const char *program) {
    const char *argv[] = {program, "--flag", NULL};
    cg_builder *b = cg_builder_new(argv);
    CHECK(b != NULL, "cg_builder_new: %s", cg_last_error_message());
    OK(cg_builder_socket(b, CG_SOCKET_STDIO, NULL));
    OK(cg_builder_ladder(b, "TERM:1s,KILL:1s"));
    cg_handle *h = cg_spawn(b); /* consumes b, also on failure */
    CHECK(h == NULL, "spawning %s succeeded", program);
    CHECK(cg_last_error_code() == CG_ERR_SPAWN, "code %d", (int)cg_last_error_code());
    const char *msg = cg_last_error_message();
    printf("%s\n", msg);
    CHECK(strstr(msg, "cg_spawn") && strstr(msg, program) && strstr(msg, "No such file"),
          "message: %s", msg);
}

int main(int argc, char **argv) {
    (void)slowserver_path(argc, argv);
    /* The first spawn opens a handle on /proc/self/fd that childguard keeps for the life of
     * the process (its check for inheritable fds): count after it. */
    expect_spawn_error("/nonexistent/cg-no-such-program");
    int before = open_fds();
    expect_spawn_error("/nonexistent/cg-no-such-program");
    expect_spawn_error("cg-no-such-program-on-path"); /* PATH lookup */
    int after = open_fds();
    CHECK(before == after, "%d fds open before, %d after", before, after);
    CHECK(waitpid(-1, NULL, WNOHANG) == -1 && errno == ECHILD, "a child was left behind");
    return 0;
}
