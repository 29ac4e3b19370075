/* HTTP and exec readiness from C: cg_builder_ready_http against a real HTTP server on a Unix
 * socket (tests/src/http_server.py under python3: argv[2]), ready on 200, not ready on 503
 * (the message quotes it) unless 503 is the status asked for; cg_builder_ready_exec with a
 * probe that passes and one that never does (its output in the message); bad input refused
 * with a message naming it. */
#include "check.h"

#include <stdint.h>
#include <sys/stat.h>
#include <sys/wait.h>

static char sock_path[256], sock_arg[300], url[600];

/* python3 -u SCRIPT unix:SOCK STATUS 0, its output captured. */
static cg_builder *http_server(const char *script, const char *status) {
    unlink(sock_path);
    const char *argv[] = {"python3", "-u", script, sock_arg, status, "0", NULL};
    cg_builder *b = cg_builder_new(argv);
    CHECK(b != NULL, "cg_builder_new: %s", cg_last_error_message());
    OK(cg_builder_ladder(b, "KILL:1s"));
    OK(cg_builder_capture(b, CG_CAPTURE_STDOUT | CG_CAPTURE_STDERR));
    return b;
}

static void close_reaped(cg_handle *h) {
    cg_report *r = NULL;
    OK(cg_close(h, &r));
    CHECK(r->status_known, "the server was not reaped: %s", r->summary);
    cg_report_free(r);
}

int main(int argc, char **argv) {
    const char *server = slowserver_path(argc, argv);
    CHECK(argc >= 3, "usage: %s SLOWSERVER HTTP_SERVER_PY", argv[0]);
    const char *script = argv[2];
    char dir[] = "/tmp/cg-c-http-XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp: %s", strerror(errno));
    snprintf(sock_path, sizeof sock_path, "%s/s.sock", dir);
    snprintf(sock_arg, sizeof sock_arg, "unix:%s", sock_path);
    /* http+unix://%2Ftmp%2Fcg-c-http-XXXXXX%2Fs.sock/health */
    size_t n = (size_t)snprintf(url, sizeof url, "http+unix://");
    for (const char *p = sock_path; *p && n + 4 < sizeof url; p++)
        n += (size_t)(*p == '/' ? snprintf(url + n, sizeof url - n, "%%2F")
                                : snprintf(url + n, sizeof url - n, "%c", *p));
    snprintf(url + n, sizeof url - n, "/health");

    /* 200: ready; the socket answers right after. */
    cg_builder *b = http_server(script, "200");
    OK(cg_builder_ready_http(b, url, 0));
    OK(cg_builder_ready_timeout(b, 30000));
    cg_handle *h = cg_spawn(b);
    CHECK(h != NULL, "cg_spawn (http 200): %s", cg_last_error_message());
    struct stat st;
    CHECK(stat(sock_path, &st) == 0 && S_ISSOCK(st.st_mode), "ready, but no socket");
    close_reaped(h);
    printf("http 200: ready\n");

    /* 503: not ready; the timeout's message quotes the answer. */
    b = http_server(script, "503");
    OK(cg_builder_ready_http(b, url, 0));
    OK(cg_builder_ready_timeout(b, 4000));
    h = cg_spawn(b);
    CHECK(h == NULL, "a 503 was ready");
    CHECK(cg_last_error_code() == CG_ERR_READY, "code %d: %s", (int)cg_last_error_code(),
          cg_last_error_message());
    CHECK(strstr(cg_last_error_message(), "503 Chosen") != NULL, "no 503 in: %s",
          cg_last_error_message());
    printf("http 503: %s\n", cg_last_error_message());

    /* ... ready when 503 is what is asked for. */
    b = http_server(script, "503");
    OK(cg_builder_ready_http(b, url, 503));
    h = cg_spawn(b);
    CHECK(h != NULL, "cg_spawn (http status 503): %s", cg_last_error_message());
    close_reaped(h);
    printf("http status 503: ready\n");

    /* exec: a probe that passes once the socket exists. */
    b = http_server(script, "200");
    const char *probe[] = {"test", "-S", sock_path, NULL};
    OK(cg_builder_ready_exec(b, probe));
    h = cg_spawn(b);
    CHECK(h != NULL, "cg_spawn (exec test -S): %s", cg_last_error_message());
    close_reaped(h);
    printf("exec: ready\n");

    /* exec: a probe that never passes; its output is in the message. */
    const char *idle[] = {"--ignore-eof", NULL};
    b = slowserver(server, idle);
    const char *failing[] = {"sh", "-c", "echo c-probe-said-9; exit 3", NULL};
    OK(cg_builder_ready_exec(b, failing));
    OK(cg_builder_ready_timeout(b, 4000));
    h = cg_spawn(b);
    CHECK(h == NULL, "a failing probe was ready");
    CHECK(cg_last_error_code() == CG_ERR_READY, "code %d: %s", (int)cg_last_error_code(),
          cg_last_error_message());
    CHECK(strstr(cg_last_error_message(), "c-probe-said-9") != NULL, "no probe output in: %s",
          cg_last_error_message());
    printf("exec failing: %s\n", cg_last_error_message());

    /* Bad input: named in the message, nothing spawned. */
    b = slowserver(server, idle);
    CHECK(cg_builder_ready_http(b, "https://127.0.0.1/", 0) == CG_ERR_INVALID_ARGUMENT,
          "https accepted");
    CHECK(strstr(cg_last_error_message(), "https://127.0.0.1/") != NULL &&
              strstr(cg_last_error_message(), "no TLS") != NULL,
          "%s", cg_last_error_message());
    CHECK(cg_builder_ready_http(b, url, 42) == CG_ERR_INVALID_ARGUMENT, "status 42 accepted");
    const char *empty[] = {NULL};
    CHECK(cg_builder_ready_exec(b, empty) == CG_ERR_INVALID_ARGUMENT, "empty argv accepted");
    CHECK(strstr(cg_last_error_message(), "empty argv") != NULL, "%s", cg_last_error_message());
    cg_builder_free(b);
    printf("bad input refused\n");

    unlink(sock_path);
    rmdir(dir);
    CHECK(waitpid(-1, NULL, WNOHANG) == -1 && errno == ECHILD, "a child was left behind");
    return 0;
}
