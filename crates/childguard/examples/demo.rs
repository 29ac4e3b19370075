//! The README demo: a server with a read in flight that still has 10 s to go, closed by
//! childguard, next to what a waitpid-only close (libnbd's `nbd_close` before the fix) costs.
//!
//! `cargo run --release --example demo -p childguard`
//!
//! The slow server is the `slowserver` fixture, embedded in this binary (it re-executes
//! itself with the `slowserver` argument), so nothing else needs building.

use std::io::{BufRead, BufReader, Write};
use std::process::Command;
use std::time::{Duration, Instant};

use childguard::{ChildHandle, Ladder, SocketMode};

const DELAY: Duration = Duration::from_secs(10);

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args_os().skip(1);
    if args.next().is_some_and(|a| a == "slowserver") {
        slowserver::main_with(vec!["slowserver".into()], args.collect());
    }

    let ladder = Ladder::from_env_or_default()?;
    println!("server: slowserver --delay-read 10s   (each READ answers after 10 s; EOF does not cut it short)");
    println!("ladder: {ladder}   (set CHILDGUARD_LADDER to change it)");

    let mut cmd = Command::new(std::env::current_exe()?);
    cmd.args(["slowserver", "--delay-read", "10s"]);
    let handle = ChildHandle::builder(cmd)
        .socket(SocketMode::Stdio)
        .ladder(ladder)
        .process_group(true)
        .spawn()?;
    let socket = handle.socket().expect("Stdio mode has a socket");
    let mut ready = String::new();
    BufReader::new(socket).read_line(&mut ready)?;
    print!("spawned: {ready}");

    let mut writer = socket;
    writer.write_all(b"READ 1\n")?;
    let read_sent = Instant::now();
    std::thread::sleep(Duration::from_millis(50));
    println!("READ 1 sent; the server now sleeps {DELAY:?} before answering");

    let report = handle.close()?;
    let closed_after = read_sent.elapsed();
    println!();
    println!("childguard close: {report}");
    println!();
    let waitpid_only = DELAY.saturating_sub(closed_after - report.total);
    println!(
        "close took {:.1} ms; a waitpid-only close would have blocked until the read finished: \
         ~{:.1} s more (estimate: the read's remaining delay, not measured here — \
         `cargo run --release -p childguard-bench -- seed` measures it)",
        report.total.as_secs_f64() * 1000.0,
        waitpid_only.as_secs_f64()
    );
    Ok(())
}
