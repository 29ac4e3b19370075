/* A ladder string that does not parse is CG_ERR_CONFIG, with a message naming the input and
 * the parser's reason; bad arguments are errors, never crashes. */
#include "check.h"

static void expect_config_error(cg_builder *b, const char *ladder, const char *needle) {
    enum cg_status st = cg_builder_ladder(b, ladder);
    CHECK(st == CG_ERR_CONFIG, "ladder \"%s\" gave %d", ladder, (int)st);
    CHECK(cg_last_error_code() == CG_ERR_CONFIG, "last code %d", (int)cg_last_error_code());
    const char *msg = cg_last_error_message();
    CHECK(msg != NULL, "no message");
    printf("%s\n", msg);
    CHECK(strstr(msg, "cg_builder_ladder") != NULL, "message does not name the call: %s", msg);
    CHECK(strstr(msg, needle) != NULL, "message does not name \"%s\": %s", needle, msg);
}

int main(int argc, char **argv) {
    const char *server = slowserver_path(argc, argv);
    const char *args[] = {server, NULL};
    cg_builder *b = cg_builder_new(args);
    CHECK(b != NULL, "cg_builder_new: %s", cg_last_error_message());

    expect_config_error(b, "HUP:1s,TREM:2s", "TREM:2s");
    expect_config_error(b, "HUP:1s,,KILL", "stray comma");
    expect_config_error(b, "TERM:soon", "soon");
    expect_config_error(b, "", "empty");
    OK(cg_builder_ladder(b, "EOF:100ms,HUP:1s,SIGTERM:2s,9"));

    CHECK(cg_builder_ladder(b, NULL) == CG_ERR_NULL_ARGUMENT, "NULL ladder accepted");
    CHECK(strstr(cg_last_error_message(), "ladder is NULL") != NULL, "%s", cg_last_error_message());
    CHECK(cg_builder_ladder(NULL, "KILL") == CG_ERR_NULL_ARGUMENT, "NULL builder accepted");
    CHECK(cg_builder_socket(b, 7, NULL) == CG_ERR_INVALID_ARGUMENT, "socket mode 7 accepted");
    CHECK(cg_builder_contain(b, -1) == CG_ERR_INVALID_ARGUMENT, "containment -1 accepted");
    CHECK(cg_builder_ready_connect_tcp(b, "localhost") == CG_ERR_INVALID_ARGUMENT,
          "tcp address without a port accepted");
    CHECK(strstr(cg_last_error_message(), "localhost") != NULL, "%s", cg_last_error_message());
    CHECK(cg_builder_env(b, "A=B", "c") == CG_ERR_INVALID_ARGUMENT, "env key with '=' accepted");
    cg_builder_free(b);

    const char *empty[] = {NULL};
    CHECK(cg_builder_new(empty) == NULL && cg_last_error_code() == CG_ERR_INVALID_ARGUMENT,
          "empty argv accepted");
    CHECK(cg_builder_new(NULL) == NULL && cg_last_error_code() == CG_ERR_NULL_ARGUMENT,
          "NULL argv accepted");
    CHECK(cg_spawn(NULL) == NULL && cg_last_error_code() == CG_ERR_NULL_ARGUMENT,
          "cg_spawn(NULL) did not fail");
    CHECK(cg_close(NULL, NULL) == CG_ERR_NULL_ARGUMENT, "cg_close(NULL) did not fail");
    /* Frees of NULL are no-ops. */
    cg_builder_free(NULL);
    cg_handle_free(NULL);
    cg_report_free(NULL);
    cg_string_free(NULL);
    return 0;
}
