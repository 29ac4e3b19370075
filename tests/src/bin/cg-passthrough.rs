//! Passthrough into a stderr nobody reads (tests/capture_callbacks.rs, issue 21 item 2). Run
//! with a stderr pipe that is never read. Server A writes 200,000 lines to its stderr, captured
//! with passthrough: our stderr fills at 64 KiB and the callback thread blocks in the write.
//! Prints, on stdout:
//! - `A_DRAINED ok|stuck`: A's tail reached its last line (its pipe is still read) within 30 s;
//! - `B_READY ok|<error>`: server B, captured, awaited by `Ready::output`, got ready;
//! - `B_TAIL <words>`: the words of B's close report's tail;
//! - `A_DROPPED N`: the lines A's report says were not passed on.
//!
//! Then exits at once (the callback thread stays blocked in its write). A watchdog ends it
//! after 90 s.

use std::io::Write;
use std::time::{Duration, Instant};

use childguard::{Capture, ChildHandle, Ready};
use childguard_tests::{dropped_lines, eventually, ladder, sh};

fn main() {
    std::thread::spawn(|| {
        std::thread::sleep(Duration::from_secs(90));
        println!("WATCHDOG");
        std::process::exit(3);
    });
    let say = |line: String| {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    };
    let a = ChildHandle::builder(sh("yes 'a line of passthrough' | head -n 200000 >&2; \
                                     echo a-done >&2; exec sleep 600"))
    .capture(Capture::stderr().passthrough(true))
    .ladder(ladder("KILL:10s"))
    .spawn()
    .expect("spawn A");
    let drained = eventually(Duration::from_secs(30), || {
        a.output_tail().is_some_and(|t| t.ends_with("a-done\n"))
    });
    say(format!(
        "A_DRAINED {}",
        if drained { "ok" } else { "stuck" }
    ));
    let began = Instant::now();
    let b = ChildHandle::builder(sh("trap 'echo goodbye >&2; exit 0' TERM; echo ready >&2; \
                                     while :; do sleep 0.05; done"))
    .capture(Capture::stderr())
    .ready(Ready::output("ready"))
    .ready_timeout(Duration::from_secs(10))
    .ladder(ladder("TERM:10s,KILL:1s"))
    .spawn();
    match b {
        Ok(b) => {
            say("B_READY ok".into());
            let report = b.close().expect("close B");
            let tail = report.output_tail.unwrap_or_default();
            say(format!(
                "B_TAIL {}",
                tail.split_whitespace().collect::<Vec<_>>().join(" ")
            ));
        }
        Err(e) => say(format!("B_READY {e} (after {:?})", began.elapsed())),
    }
    let report = a.close().expect("close A");
    say(format!("A_DROPPED {}", dropped_lines(&report)));
    std::process::exit(0);
}
