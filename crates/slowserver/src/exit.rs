//! The ways the process ends, or declines to.

use std::process;
use std::thread;
use std::time::Duration;

/// Sleeps `delay` (the `--slow-exit` linger), then exits with `code`.
pub fn after(delay: Option<Duration>, code: i32) -> ! {
    if let Some(delay) = delay {
        thread::sleep(delay);
    }
    process::exit(code)
}

/// Blocks forever without spinning; only a signal ends the process.
pub fn never() -> ! {
    loop {
        thread::sleep(Duration::from_secs(3600));
    }
}
