//! Unit tests of [`super`].

use super::*;

fn ms(n: f64) -> Duration {
    Duration::from_secs_f64(n / 1000.0)
}

#[test]
fn display_lists_steps_in_the_order_they_happened() {
    use std::os::unix::process::ExitStatusExt;
    // The leader exited before the close's signals, which went to surviving group members.
    let mut report = CloseReport::new(Some("server".into()), Some(42));
    report.shutdown = Some(ms(0.01));
    report.exited = Some(Duration::ZERO);
    report.ended_by = Ending::BeforeClose;
    report.status = Some(ExitStatus::from_raw(0));
    report
        .signals
        .push(SentSignal::new(Signal::TERM, ms(1.2), 0, true));
    report.reaped = Some(ms(1.5));
    report.total = ms(1.6);
    assert_eq!(
        report.to_string(),
        "server[42]: exited +0.0ms (exit 0, ended by before close), shutdown +0.0ms, \
         TERM (group) +1.2ms, reaped +1.5ms; total 1.6ms"
    );
}

#[test]
fn display_keeps_the_step_order_for_equal_times() {
    let mut report = CloseReport::new(Some("server".into()), Some(7));
    report.shutdown = Some(Duration::ZERO);
    report
        .signals
        .push(SentSignal::new(Signal::KILL, Duration::ZERO, 0, false));
    report.exited = Some(Duration::ZERO);
    report.reaped = Some(Duration::ZERO);
    report.ended_by = Ending::Rung {
        index: 0,
        signal: Signal::KILL,
    };
    let line = report.to_string();
    assert!(
        line.starts_with(
            "server[7]: shutdown +0.0ms, KILL +0.0ms, exited +0.0ms (status lost, ended by \
             rung 0 KILL), reaped +0.0ms"
        ),
        "{line}"
    );
}

#[test]
fn display_names_skipped_rungs_and_a_default_action() {
    use std::os::unix::process::ExitStatusExt;
    let mut report = CloseReport::new(Some("server".into()), Some(9));
    report.shutdown = Some(Duration::ZERO);
    report.skipped.push(SkippedRung {
        rung: 0,
        signal: Signal::HUP,
        at: ms(0.1),
    });
    let mut term = SentSignal::new(Signal::TERM, ms(0.2), 1, false);
    term.disposition = Some(Disposition::Default);
    report.signals.push(term);
    report.exited = Some(ms(0.3));
    report.status = Some(ExitStatus::from_raw(libc::SIGTERM));
    report.ended_by = Ending::Rung {
        index: 1,
        signal: Signal::TERM,
    };
    report.default_action = true;
    report.reaped = Some(ms(0.3));
    report.total = ms(0.4);
    assert_eq!(
        report.to_string(),
        "server[9]: shutdown +0.0ms, HUP +0.1ms skipped: ignored by the server, TERM +0.2ms, \
         exited +0.3ms (signal TERM, ended by rung 1 TERM: default action, no handler ran), \
         reaped +0.3ms; total 0.4ms"
    );
}
