//! `cg-sigconf [--ignore SIG]... [--block SIG]... [--subreaper] -- PROG [ARG...]`: changes its
//! own signal configuration (or registers as a child subreaper), then execs PROG as it is —
//! what tini's `test/sigconf/sigconf-test.c` and `test/subreaper-proxy.py` do before they run
//! tini (tests/init.rs). Signals are numbers. Every signal is reset to its default first —
//! `SIGPIPE`, which the Rust runtime ignores, and whatever the tests' own start left ignored
//! (a background job ignores `INT` and `QUIT`, `nohup` `HUP`) — so PROG starts with only what
//! was asked.

#![deny(unsafe_code)]

use childguard_tests::sys;

fn main() {
    let mut args = std::env::args_os().skip(1);
    let mut block = Vec::new();
    sys::default_all_signals();
    while let Some(arg) = args.next() {
        let arg = arg.into_string().expect("UTF-8 option");
        let mut number = || -> i32 {
            let v = args.next().expect("a signal number after the option");
            v.to_str()
                .and_then(|v| v.parse().ok())
                .expect("a signal number")
        };
        match arg.as_str() {
            "--" => break,
            "--ignore" => sys::ignore_signal(number()).expect("ignore"),
            "--block" => block.push(number()),
            "--subreaper" => rustix::process::set_child_subreaper(Some(rustix::process::getpid()))
                .expect("PR_SET_CHILD_SUBREAPER"),
            other => panic!("cg-sigconf: unknown option {other:?}"),
        }
    }
    sys::block_signals(&block).expect("sigprocmask");
    let argv: Vec<std::ffi::OsString> = args.collect();
    let e = sys::execvp_raw(&argv);
    eprintln!("cg-sigconf: exec {argv:?}: {e}");
    std::process::exit(127);
}
