//! Quirk avoided: glibc `execvp`'s shell fallback.
//!
//! When a `pre_exec` hook is installed (`exit_with_parent`, or an fd sweep), std forks and
//! execs with glibc's `execvp`, which — as POSIX allows — runs a file that the kernel refuses
//! with `ENOEXEC` (no ELF header for this machine, no `#!` line) as a `/bin/sh` script. Without a hook std uses
//! `posix_spawnp`, which fails with `ENOEXEC`. So that the same program gives the same answer
//! whichever path is taken, we look at the file's first bytes before forking and refuse a
//! format the kernel would refuse. Formats registered with `binfmt_misc` are left to the kernel
//! (the check is skipped when any handler is registered).

use std::ffi::OsStr;
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// `Err(ENOEXEC)` if the program `command` would run is a regular file the kernel cannot
/// execute. Anything unclear (not found, unreadable) is left for the exec to report.
pub(crate) fn refuse_unknown_format(command: &Command) -> io::Result<()> {
    // std does this exec, env_clear included; unreadable, we guess "not cleared" (this check
    // only makes a file the kernel would refuse fail the same way on either spawn path).
    let env_clear = crate::spawn::command_debug::read(command).is_ok_and(|h| h.env_clear);
    let Ok(resolved) = crate::spawn::program::resolve(command, env_clear) else {
        return Ok(());
    };
    let mut path = PathBuf::from(OsStr::from_bytes(resolved.as_bytes()));
    if path.is_relative() {
        if let Some(dir) = command.get_current_dir() {
            path = dir.join(path);
        }
    }
    // A file we may not execute fails the exec with EACCES ("Permission denied", as a shell
    // and timeout(1) say), whatever its first bytes: leave that answer to the exec.
    if rustix::fs::access(&path, rustix::fs::Access::EXEC_OK).is_err() {
        return Ok(());
    }
    let Ok(mut file) = std::fs::File::open(&path) else {
        return Ok(());
    };
    let mut header = [0u8; 20];
    let n = read_up_to(&mut file, &mut header);
    let header = &header[..n];
    let known = header.starts_with(b"#!") || is_native_elf(header);
    if known || n == 0 && !is_regular(&path) || binfmt_misc_in_use() {
        return Ok(());
    }
    Err(io::Error::from_raw_os_error(libc::ENOEXEC))
}

fn read_up_to(file: &mut std::fs::File, buf: &mut [u8]) -> usize {
    let mut filled = 0;
    while filled < buf.len() {
        match file.read(&mut buf[filled..]) {
            Ok(0) | Err(_) => break,
            Ok(n) => filled += n,
        }
    }
    filled
}

/// An ELF header the kernel's loader would take on this machine: magic, class (32/64-bit),
/// byte order, type (executable or shared object) and machine. A file that passes this but is
/// corrupt further in is still left to the kernel (and, on the fork path, to `execvp`).
fn is_native_elf(h: &[u8]) -> bool {
    if h.len() < 20 || !h.starts_with(b"\x7fELF") {
        return false;
    }
    let class = if cfg!(target_pointer_width = "64") {
        2
    } else {
        1
    };
    let data = if cfg!(target_endian = "little") { 1 } else { 2 };
    let read16 = |i: usize| {
        let b = [h[i], h[i + 1]];
        if data == 1 {
            u16::from_le_bytes(b)
        } else {
            u16::from_be_bytes(b)
        }
    };
    let e_type = read16(16);
    let machine_ok = native_machine().is_none_or(|m| m == read16(18));
    h[4] == class && h[5] == data && (e_type == 2 || e_type == 3) && machine_ok
}

/// `e_machine` of this architecture, where we know it.
fn native_machine() -> Option<u16> {
    if cfg!(target_arch = "x86_64") {
        Some(62)
    } else if cfg!(target_arch = "aarch64") {
        Some(183)
    } else if cfg!(target_arch = "x86") {
        Some(3)
    } else if cfg!(target_arch = "arm") {
        Some(40)
    } else if cfg!(target_arch = "riscv64") {
        Some(243)
    } else {
        None
    }
}

fn is_regular(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file())
}

/// Whether `binfmt_misc` has any handler (entries besides `register` and `status`).
fn binfmt_misc_in_use() -> bool {
    std::fs::read_dir("/proc/sys/fs/binfmt_misc").is_ok_and(|dir| {
        dir.filter_map(Result::ok)
            .any(|e| e.file_name() != "register" && e.file_name() != "status")
    })
}
