/* A server stuck in a 60 s read is closed within its ladder's bound: the shutdown does not
 * wake it (it is sleeping, not reading), the HUP rung ends it. The HUP rung's grace is long
 * (5 s) so that a loaded machine, or valgrind, cannot make the exit miss it. */
#include "check.h"

#include <signal.h>

int main(int argc, char **argv) {
    const char *server = slowserver_path(argc, argv);
    const char *flags[] = {"--delay-read", "60s", NULL};
    cg_builder *b = slowserver(server, flags);
    OK(cg_builder_ladder(b, "HUP:5s,TERM:2s,KILL:5s"));
    cg_handle *h = cg_spawn(b);
    CHECK(h != NULL, "cg_spawn: %s", cg_last_error_message());
    int fd = cg_socket_fd(h);
    CHECK(fd >= 0, "no socket fd");
    CHECK(cg_pid(h) > 0, "no pid");
    read_ready(fd);
    send_text(fd, "READ 4096\n"); /* answered only after 60 s */

    cg_report *r = NULL;
    OK(cg_close(h, &r));
    CHECK(r != NULL, "no report");
    printf("%s\n", r->summary);
    /* Bound: the ladder's total grace (12 s) is the promise; far below the 60 s read. */
    CHECK(r->total_ms < 12000.0, "close took %.1f ms", r->total_ms);
    CHECK(r->shutdown_ms >= 0.0, "no shutdown recorded");
    CHECK(r->ended_by == CG_ENDING_RUNG && r->ended_by_rung == 0 && r->ended_by_signal == SIGHUP,
          "ended by %d rung %lld signal %d", (int)r->ended_by, (long long)r->ended_by_rung,
          r->ended_by_signal);
    CHECK(r->status_known && r->exit_signal == SIGHUP, "exit signal %d", r->exit_signal);
    CHECK(r->signals_len >= 1 && r->signals[0].signal == SIGHUP && r->signals[0].rung == 0,
          "first signal: %zu sent", r->signals_len);
    CHECK(r->reaped_ms >= 0.0 && !r->handed_to_reaper, "not reaped by the close");
    char *json = cg_report_json(r);
    CHECK(json != NULL, "cg_report_json: %s", cg_last_error_message());
    CHECK(strstr(json, "\"ended_by\":{\"kind\":\"rung\",\"index\":0,\"signal\":\"HUP\"}") != NULL,
          "json: %s", json);
    cg_string_free(json);
    cg_report_free(r);
    return 0;
}
