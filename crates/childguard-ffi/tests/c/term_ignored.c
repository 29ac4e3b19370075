/* A server that ignores HUP and TERM: cg_kill(TERM) does not end it, the close climbs to the
 * KILL rung and the report says so, with each signal and its time. With
 * cg_builder_skip_ignored(false) every rung is sent and its grace spent; by default the rungs
 * it ignores are skipped at once and the report lists them. */
#include "check.h"

#include <signal.h>
#include <stdbool.h>

int main(int argc, char **argv) {
    const char *server = slowserver_path(argc, argv);
    const char *flags[] = {"--ignore", "HUP,TERM", "--ignore-eof", NULL};
    cg_builder *b = slowserver(server, flags);
    OK(cg_builder_ladder(b, "HUP:200ms,TERM:200ms,KILL:5s"));
    OK(cg_builder_process_group(b, true));
    cg_handle *h = cg_spawn(b);
    CHECK(h != NULL, "cg_spawn: %s", cg_last_error_message());
    read_ready(cg_socket_fd(h));

    bool exited = true;
    OK(cg_kill(h, SIGTERM, 100, &exited));
    CHECK(!exited, "a TERM-ignoring server exited on TERM");
    CHECK(cg_kill(h, 12345, 0, NULL) == CG_ERR_INVALID_ARGUMENT, "signal 12345 accepted");
    CHECK(strstr(cg_last_error_message(), "12345") != NULL, "message: %s",
          cg_last_error_message());

    cg_report *r = NULL;
    OK(cg_close(h, &r));
    printf("%s\n", r->summary);
    CHECK(r->ended_by == CG_ENDING_RUNG && r->ended_by_signal == SIGKILL && r->ended_by_rung == 2,
          "ended by %d rung %lld signal %d", (int)r->ended_by, (long long)r->ended_by_rung,
          r->ended_by_signal);
    CHECK(r->status_known && r->exit_signal == SIGKILL, "exit signal %d", r->exit_signal);
    /* The kill counted as the TERM rung: the close resumed after it, so only the KILL rung's
     * signal was sent by the close itself (the HUP rung comes before TERM: skipped too). */
    CHECK(r->signals_len >= 1, "no signal recorded");
    const cg_sent_signal *last = &r->signals[r->signals_len - 1];
    CHECK(last->signal == SIGKILL && last->rung == 2 && last->to_group,
          "last signal %d rung %zu group %d", last->signal, last->rung, last->to_group);
    for (size_t i = 0; i < r->signals_len; i++)
        CHECK(r->signals[i].at_ms >= 0.0 && r->signals[i].at_ms <= r->total_ms,
              "signal %zu at %.1f ms of %.1f", i, r->signals[i].at_ms, r->total_ms);
    /* The close returns by the KILL rung's deadline (+5.2 s) at the latest. */
    CHECK(r->total_ms < 10000.0, "close took %.1f ms", r->total_ms);
    CHECK(r->group_survivors_len == 0, "%zu group survivors", r->group_survivors_len);
    cg_report_free(r);

    /* Without a kill first, skipping off: all three rungs, in order. */
    b = slowserver(server, flags);
    OK(cg_builder_ladder(b, "HUP:200ms,TERM:200ms,KILL:5s"));
    OK(cg_builder_skip_ignored(b, false));
    h = cg_spawn(b);
    CHECK(h != NULL, "cg_spawn: %s", cg_last_error_message());
    read_ready(cg_socket_fd(h));
    OK(cg_close(h, &r));
    printf("%s\n", r->summary);
    CHECK(r->signals_len == 3, "%zu signals sent", r->signals_len);
    CHECK(r->signals[0].signal == SIGHUP && r->signals[1].signal == SIGTERM &&
              r->signals[2].signal == SIGKILL,
          "signals %d %d %d", r->signals[0].signal, r->signals[1].signal, r->signals[2].signal);
    CHECK(r->signals[1].at_ms >= 200.0 && r->signals[2].at_ms >= 400.0,
          "rungs early: TERM at %.1f, KILL at %.1f ms", r->signals[1].at_ms, r->signals[2].at_ms);
    CHECK(r->ended_by == CG_ENDING_RUNG && r->ended_by_rung == 2, "ended by rung %lld",
          (long long)r->ended_by_rung);
    CHECK(r->skipped_len == 0 && r->skipped == NULL, "%zu rungs skipped", r->skipped_len);
    cg_report_free(r);

    /* Skipping on (the default): HUP and TERM are ignored, so both are skipped at once and KILL
     * is the only signal sent, well before the 200 ms a HUP rung would have waited. */
    b = slowserver(server, flags);
    OK(cg_builder_ladder(b, "HUP:200ms,TERM:200ms,KILL:5s"));
    h = cg_spawn(b);
    CHECK(h != NULL, "cg_spawn: %s", cg_last_error_message());
    read_ready(cg_socket_fd(h));
    OK(cg_close(h, &r));
    printf("%s\n", r->summary);
    CHECK(r->skipped_len == 2, "%zu rungs skipped", r->skipped_len);
    CHECK(r->skipped[0].signal == SIGHUP && r->skipped[0].rung == 0 &&
              r->skipped[1].signal == SIGTERM && r->skipped[1].rung == 1,
          "skipped %d (rung %zu), %d (rung %zu)", r->skipped[0].signal, r->skipped[0].rung,
          r->skipped[1].signal, r->skipped[1].rung);
    CHECK(r->signals_len == 1 && r->signals[0].signal == SIGKILL && r->signals[0].rung == 2,
          "%zu signals sent, the first %d", r->signals_len, r->signals[0].signal);
    CHECK(r->signals[0].at_ms < 200.0, "KILL at %.1f ms: a grace was spent", r->signals[0].at_ms);
    CHECK(strstr(r->summary, "HUP +") != NULL &&
              strstr(r->summary, "skipped: ignored by the server") != NULL,
          "summary: %s", r->summary);
    CHECK(r->ended_by == CG_ENDING_RUNG && r->ended_by_rung == 2 && !r->default_action,
          "ended by rung %lld, default action %d", (long long)r->ended_by_rung,
          r->default_action);
    char *json = cg_report_json(r);
    CHECK(json != NULL && strstr(json, "\"skipped\":[{\"rung\":0,\"signal\":\"HUP\"") != NULL,
          "json: %s", json ? json : "(null)");
    cg_string_free(json);
    cg_report_free(r);
    return 0;
}
