//! A server that tells what it got: `cg-env-dump FILE [--notify]`.
//!
//! Writes its argv to `FILE.argv` and its environment to `FILE` (each entry followed by a NUL;
//! the environment through `FILE.tmp` and a rename, so `FILE` is whole once it exists and the
//! argv file is written before it), then, if socket-activated (`LISTEN_FDS=1`, `LISTEN_PID`
//! its own pid), accepts one connection on fd 3, and with `--notify` sends `READY=1` to
//! `$NOTIFY_SOCKET`. So a spawn that waits for the accept or for `READY=1` returns with the
//! files written. Then sleeps until a signal ends it.

#![deny(unsafe_code)]

use std::ffi::OsString;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

fn entries(items: impl Iterator<Item = OsString>) -> Vec<u8> {
    let mut out = Vec::new();
    for item in items {
        out.extend_from_slice(item.as_bytes());
        out.push(0);
    }
    out
}

fn write(path: &PathBuf, bytes: &[u8]) {
    let mut file = std::fs::File::create(path)
        .unwrap_or_else(|e| panic!("cg-env-dump: creating {}: {e}", path.display()));
    file.write_all(bytes)
        .and_then(|()| file.sync_all())
        .unwrap_or_else(|e| panic!("cg-env-dump: writing {}: {e}", path.display()));
}

fn main() {
    let args: Vec<OsString> = std::env::args_os().collect();
    let Some(file) = args.get(1).map(PathBuf::from) else {
        eprintln!("usage: cg-env-dump FILE [--notify]");
        std::process::exit(2);
    };
    let notify = args.iter().skip(2).any(|a| a == "--notify");
    let env = entries(std::env::vars_os().map(|(k, v)| {
        let mut entry = k;
        entry.push("=");
        entry.push(v);
        entry
    }));
    let mut argv_file = file.clone().into_os_string();
    argv_file.push(".argv");
    write(&argv_file.into(), &entries(args.iter().cloned()));
    let mut tmp = file.clone().into_os_string();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    write(&tmp, &env);
    std::fs::rename(&tmp, &file).expect("cg-env-dump: rename");

    let activated = std::env::var("LISTEN_FDS").is_ok_and(|v| v == "1")
        && std::env::var("LISTEN_PID").is_ok_and(|v| v == std::process::id().to_string());
    let _connection = activated.then(|| {
        childguard_tests::sys::activation_listener()
            .accept()
            .expect("cg-env-dump: accept on fd 3")
    });
    if notify {
        let path = std::env::var_os("NOTIFY_SOCKET").expect("cg-env-dump --notify: NOTIFY_SOCKET");
        std::os::unix::net::UnixDatagram::unbound()
            .and_then(|s| s.send_to(b"READY=1", &path))
            .expect("cg-env-dump: sending READY=1");
    }
    loop {
        std::thread::park();
    }
}
