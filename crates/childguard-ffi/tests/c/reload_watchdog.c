/* sd_notify from C (issue 23 item 4): cg_reload returns once slowserver's RELOADING=1 is
 * followed by READY=1, and fails with CG_ERR_READY when no READY=1 comes; cg_builder_watchdog
 * closes a server that stops sending WATCHDOG=1 (cg_watchdog_missed says so; under valgrind,
 * without pidfds, only cg_close closes it), and the report names the miss. */
#include "check.h"

#include <signal.h>

int main(int argc, char **argv) {
    const char *server = slowserver_path(argc, argv);

    const char *reloads[] = {"--notify", "--reload", "100ms", "--watchdog-every", "20ms",
                             "--ignore-eof", NULL};
    cg_builder *b = slowserver(server, reloads);
    OK(cg_builder_ready_notify(b));
    OK(cg_builder_watchdog(b, 30000));
    cg_handle *h = cg_spawn(b);
    CHECK(h != NULL, "cg_spawn: %s", cg_last_error_message());
    uint64_t took = 0;
    OK(cg_reload(h, SIGHUP, 20000, NULL, &took));
    CHECK(took >= 100, "reload took %llu ms, less than slowserver's 100 ms", (unsigned long long)took);
    printf("reload: done\n");
    cg_report *r = NULL;
    OK(cg_close(h, &r));
    cg_report_free(r);

    const char *never[] = {"--notify", "--reload", "never", "--ignore-eof", NULL};
    b = slowserver(server, never);
    OK(cg_builder_ready_notify(b));
    h = cg_spawn(b);
    CHECK(h != NULL, "cg_spawn: %s", cg_last_error_message());
    CHECK(cg_reload(h, SIGHUP, 300, NULL, NULL) == CG_ERR_READY, "a reload without READY=1: %s",
          cg_last_error_message());
    printf("reload never: %s\n", cg_last_error_message());
    OK(cg_close(h, NULL));

    const char *hangs[] = {"--notify", "--watchdog-every", "20ms", "--watchdog-for", "200ms",
                           "--ignore-eof", NULL};
    b = slowserver(server, hangs);
    OK(cg_builder_ready_notify(b));
    OK(cg_builder_watchdog(b, 300));
    OK(cg_builder_ladder(b, "TERM:5s,KILL:1s"));
    h = cg_spawn(b);
    CHECK(h != NULL, "cg_spawn: %s", cg_last_error_message());
    /* Bounded wait for the miss (not a sleep-and-hope: the condition, checked every 10 ms). */
    uint64_t at = 0;
    for (int waited_ms = 0; !cg_watchdog_missed(h, &at) && waited_ms < 20000; waited_ms += 10)
        usleep(10 * 1000);
    CHECK(at >= 300, "no watchdog miss within 20 s (or too early: %llu ms)", (unsigned long long)at);
    OK(cg_close(h, &r));
    char *json = cg_report_json(r);
    CHECK(json != NULL && strstr(json, "watchdog missed at +") != NULL, "json: %s",
          json ? json : cg_last_error_message());
    printf("watchdog: missed\n");
    cg_string_free(json);
    cg_report_free(r);

    b = slowserver(server, NULL);
    OK(cg_builder_watchdog(b, 1000));
    h = cg_spawn(b);
    CHECK(h == NULL && cg_last_error_code() == CG_ERR_CONFIG, "a watchdog without notify: %s",
          cg_last_error_message());
    return 0;
}
