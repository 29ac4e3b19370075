//! Would a program spawned now inherit any fd of ours? The check that lets a spawn keep std's
//! `posix_spawn` (no `pre_exec` hook, so no `fork`) when there is nothing to sweep.
//!
//! Linux: asks `fcntl(2)` `F_GETFD` about every slot of the table's dense run (from `first` to
//! about the number of open fds, which `fstat` of `/proc/self/fd` gives on Linux ≥ 6.2: fds are
//! handed out lowest first), and lists `/proc/self/fd` only above it, asking `fcntl` about each
//! entry there. A probe costs ~0.14 µs a slot, a listed entry ~0.4 µs. A table of more than
//! `LISTING_LIMIT` (256) open fds is probed slot by slot up to its size (`FDSize` in
//! `/proc/self/status`): a program with thousands of children holds thousands of pidfds and
//! sockets. Opening that directory is half the cost of the check (a path walk through
//! the `/proc/self` symlink and a pid lookup, ~3 µs of ~7 µs measured), so one directory handle
//! is kept for the life of the process, close-on-exec, and repositioned (`lseek` to the first
//! fd of interest) for each check; a lock serializes the checks, which share its file offset.
//! Entries are read with `getdents64` into a stack buffer: nothing is allocated per entry.
//!
//! Races avoided:
//! - `fork()` without `exec`: a handle opened before the fork lists the *parent's* table (the
//!   `/proc/self` it resolved was the parent's pid). The pid the handle was opened in is kept
//!   with it; a check in another pid closes it and opens its own.
//! - fd number reuse: code that closes fds it does not own (a daemonizing library running
//!   `close_range(3, ~0)`) frees our number, and the next `open` anywhere gets it. Every check
//!   `fstat`s the handle and compares device and inode with those recorded at open; on a
//!   mismatch the number is forgotten — never closed, it is somebody else's now — and a new
//!   handle opened.
//!
//! Left open, as for every `fork` in a program that opens fds without `O_CLOEXEC`: an fd
//! opened so by another thread *after* the check and before the spawn reaches the child. Only
//! the opener can close that race (by using `O_CLOEXEC`). Fds that exist for the whole check
//! are always seen: `getdents64` on this directory walks the table in ascending fd order.
//!
//! Elsewhere (no `/proc/self/fd`) the answer is always "yes": the spawn then sweeps.

/// Whether this process holds an fd `>= first` without close-on-exec. Any error reading the
/// table answers `true`, so the caller sweeps rather than risk a leak.
pub(crate) fn any_from(first: i32) -> bool {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        linux::any_from(first).unwrap_or(true)
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    {
        let _ = first;
        true
    }
}

#[cfg(any(target_os = "linux", target_os = "android"))]
mod linux {
    use std::io;
    use std::mem::MaybeUninit;
    use std::os::fd::{AsRawFd, IntoRawFd, OwnedFd};
    use std::sync::{Mutex, PoisonError};

    use rustix::fs::{self, Mode, OFlags, RawDir, SeekFrom};

    use crate::sys;

    /// The kept `/proc/self/fd` handle, opened on the first check.
    static FD_DIR: Mutex<Option<FdDir>> = Mutex::new(None);

    /// An open `/proc/self/fd` and what identifies it (see the module's races).
    #[derive(Debug)]
    struct FdDir {
        fd: OwnedFd,
        /// The process it was opened in: its listing is that process's table.
        pid: u32,
        dev: u64,
        ino: u64,
    }

    impl FdDir {
        fn open() -> io::Result<FdDir> {
            let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
            let mut fd = fs::open("/proc/self/fd", flags, Mode::empty())?;
            if fd.as_raw_fd() < 3 {
                // A program that closed stdin/stdout/stderr expects its next open to land there;
                // a handle kept for the life of the process must not sit on 0–2.
                fd = rustix::io::fcntl_dupfd_cloexec(&fd, 3)?;
            }
            let stat = fs::fstat(&fd)?;
            Ok(FdDir {
                fd,
                pid: std::process::id(),
                dev: stat.st_dev,
                ino: stat.st_ino,
            })
        }

        /// How many fds the process has open (`st_size` of this directory, Linux ≥ 6.2; `None`
        /// before), or `Err` when our fd number no longer refers to the directory we opened.
        fn open_fds_if_intact(&self) -> Result<Option<u64>, NotOurs> {
            match fs::fstat(&self.fd) {
                Ok(s) if s.st_dev == self.dev && s.st_ino == self.ino => {
                    Ok((s.st_size > 0).then_some(s.st_size as u64))
                }
                _ => Err(NotOurs),
            }
        }
    }

    /// Our fd number holds something else now (see the module's races).
    #[derive(Debug)]
    struct NotOurs;

    /// Above this many open fds, the listing (~0.6 µs an entry: procfs formats and looks up a
    /// dentry for each) costs more than asking `fcntl` about every slot of the table (~0.15 µs
    /// a slot, slots ≈ open fds rounded up to a power of two). Measured at 10,000 fds: listing
    /// 7.5 ms, slots 1.5 ms.
    const LISTING_LIMIT: u64 = 256;

    pub(super) fn any_from(first: i32) -> io::Result<bool> {
        let mut kept = FD_DIR.lock().unwrap_or_else(PoisonError::into_inner);
        let (dir, open_fds) = usable(&mut kept)?;
        let first = first.max(0);
        let Some(open_fds) = open_fds else {
            return any_listed_from(dir, first); // kernel < 6.2: no count, list everything
        };
        if open_fds > LISTING_LIMIT {
            return Ok(any_in_slots(first, table_slots()?));
        }
        // Fds are handed out lowest first, so most of a table is one dense run from fd 0, about
        // as long as the count of open fds. Ask `fcntl` about every slot of that run, and list
        // only what lies above it (an inherited fd 251, say). Every number below `dense_end`
        // is asked, every open fd from `dense_end` up is listed: nothing relies on the count
        // being exact, which another thread may change at any moment.
        let dense_end = (open_fds as i32 + DENSE_SLACK).max(first);
        if any_in_slots(first, dense_end) {
            return Ok(true);
        }
        any_listed_from(dir, dense_end)
    }

    /// Slots probed past the count of open fds, for a few holes in the dense run.
    const DENSE_SLACK: i32 = 2;

    /// Lists the table from fd `from` up and asks `fcntl` about each entry.
    fn any_listed_from(dir: &FdDir, from: i32) -> io::Result<bool> {
        // In this directory an offset is an fd number plus 2 ("." and ".." come first):
        // `proc_readfd_common` in fs/proc/fd.c resumes at fd `pos - 2`. Seeking there rewinds
        // the kept handle and skips every fd below `from` in one call.
        fs::seek(&dir.fd, SeekFrom::Start(2 + from as u64))?;
        let mut buf = [MaybeUninit::<u8>::uninit(); 2048];
        let mut entries = RawDir::new(&dir.fd, &mut buf);
        while let Some(entry) = entries.next() {
            let Some(fd) = fd_number(entry?.file_name().to_bytes()) else {
                continue; // "." and "..", had the seek not skipped them
            };
            // Our own handle is listed too; it is close-on-exec, so it never counts.
            if fd >= from && sys::is_inheritable(fd) {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// The kept handle, if it is still ours and this process's, else a fresh one; with the
    /// number of fds open (when the kernel tells).
    fn usable(kept: &mut Option<FdDir>) -> io::Result<(&FdDir, Option<u64>)> {
        if let Some(dir) = kept.take() {
            match (dir.open_fds_if_intact(), dir.pid == std::process::id()) {
                (Ok(open_fds), true) => return Ok((kept.insert(dir), open_fds)),
                // Inherited through fork(): ours to close, but it lists the parent's table.
                (Ok(_), false) => drop(dir),
                // The number was closed behind our back and may be reused: forget it.
                (Err(NotOurs), _) => {
                    let _ = dir.fd.into_raw_fd();
                }
            }
        }
        let dir = kept.insert(FdDir::open()?);
        let open_fds = dir.open_fds_if_intact().ok().flatten();
        Ok((dir, open_fds))
    }

    /// The size of our fd table (`FDSize` in `/proc/self/status`): every open fd is below it.
    /// An fd opened after this read may be above it; that is the race any check leaves open.
    fn table_slots() -> io::Result<i32> {
        let status = crate::base::kernel_text::read("/proc/self/status")?;
        status
            .lines()
            .find_map(|line| line.strip_prefix("FDSize:"))
            .and_then(|size| size.trim().parse().ok())
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no FDSize in status"))
    }

    /// Asks `fcntl` about every fd number in `first..slots`.
    fn any_in_slots(first: i32, slots: i32) -> bool {
        (first..slots).any(sys::is_inheritable)
    }

    /// The fd number a `/proc/self/fd` entry names, or `None` for anything else.
    fn fd_number(name: &[u8]) -> Option<i32> {
        if name.is_empty() || !name.iter().all(u8::is_ascii_digit) {
            return None;
        }
        std::str::from_utf8(name).ok()?.parse().ok()
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn names_parse_as_fd_numbers_only() {
            assert_eq!(fd_number(b"0"), Some(0));
            assert_eq!(fd_number(b"251"), Some(251));
            assert_eq!(fd_number(b"."), None);
            assert_eq!(fd_number(b".."), None);
            assert_eq!(fd_number(b""), None);
            assert_eq!(fd_number(b"99999999999"), None);
        }

        /// Tests that open fds without close-on-exec and compare answers run one at a time.
        static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

        /// The answer an independent reader of the table gives (std's `read_dir`, fresh open).
        fn oracle(first: i32) -> bool {
            std::fs::read_dir("/proc/self/fd")
                .unwrap()
                .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
                .any(|n| n >= first && sys::is_inheritable(n))
        }

        #[test]
        fn agrees_with_a_fresh_read_of_the_table_before_and_after_marking() {
            let _one = ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner);
            let dup = rustix::io::dup(std::io::stdin()).unwrap(); // dup(2): no close-on-exec
            let raw = dup.as_raw_fd();
            assert!(oracle(raw), "precondition: fd {raw} is inheritable");
            // Twice: the kept handle must be rewound, not read on from where it stopped.
            for _ in 0..2 {
                assert!(
                    any_from(raw).unwrap(),
                    "fd {raw} without close-on-exec not seen"
                );
                assert_eq!(any_from(raw + 1).unwrap(), oracle(raw + 1));
            }
            rustix::io::fcntl_setfd(&dup, rustix::io::FdFlags::CLOEXEC).unwrap();
            assert_eq!(any_from(raw).unwrap(), oracle(raw));
            assert_eq!(any_from(3).unwrap(), oracle(3));
        }

        /// Marks the fds this test process inherited without close-on-exec (from whatever ran
        /// it) close-on-exec for as long as it lives, so a test controls every inheritable fd.
        struct StraysMarked(Vec<OwnedFd>);

        impl StraysMarked {
            fn new() -> StraysMarked {
                let strays = std::fs::read_dir("/proc/self/fd")
                    .unwrap()
                    .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
                    .filter(|&n| n >= 3 && sys::is_inheritable(n))
                    .map(sys::own_raw_fd_for_test)
                    .collect::<Vec<_>>();
                for fd in &strays {
                    rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::CLOEXEC).unwrap();
                }
                StraysMarked(strays)
            }
        }

        impl Drop for StraysMarked {
            fn drop(&mut self) {
                for fd in self.0.drain(..) {
                    let _ = rustix::io::fcntl_setfd(&fd, rustix::io::FdFlags::empty());
                    let _ = fd.into_raw_fd(); // not ours to close
                }
            }
        }

        #[test]
        fn an_inheritable_fd_is_seen_in_the_dense_run_and_above_it() {
            let _one = ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner);
            let _strays = StraysMarked::new();
            assert!(!oracle(3), "precondition: no inheritable fd left");
            assert!(!any_from(3).unwrap());
            let null = std::fs::File::open("/dev/null").unwrap();
            // In the dense run (the lowest free number): only the slot probe can find it.
            let low = rustix::io::dup(&null).unwrap(); // dup(2): no close-on-exec
            let low_raw = low.as_raw_fd();
            {
                let mut kept = FD_DIR.lock().unwrap_or_else(PoisonError::into_inner);
                let (_, open_fds) = usable(&mut kept).unwrap();
                let open_fds = open_fds.expect("precondition: Linux >= 6.2 counts open fds");
                assert!(
                    low_raw < open_fds as i32 + DENSE_SLACK,
                    "precondition: fd {low_raw} in the dense run ({open_fds} open)"
                );
            }
            assert!(any_from(3).unwrap(), "probed fd {low_raw} not seen");
            rustix::io::fcntl_setfd(&low, rustix::io::FdFlags::CLOEXEC).unwrap();
            assert!(!any_from(3).unwrap());
            // Far above the dense run: only the listing can find it.
            let high = rustix::io::fcntl_dupfd_cloexec(&null, 700).unwrap();
            rustix::io::fcntl_setfd(&high, rustix::io::FdFlags::empty()).unwrap();
            assert!(
                any_from(3).unwrap(),
                "listed fd {} not seen",
                high.as_raw_fd()
            );
            rustix::io::fcntl_setfd(&high, rustix::io::FdFlags::CLOEXEC).unwrap();
            assert!(!any_from(3).unwrap());
        }

        #[test]
        fn a_table_too_big_to_list_is_checked_slot_by_slot_with_the_same_answer() {
            let _one = ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner);
            // Close-on-exec fds, enough to leave the listing for the slot probe.
            let null = std::fs::File::open("/dev/null").unwrap();
            let many: Vec<_> = (0..LISTING_LIMIT + 50)
                .map(|_| rustix::io::fcntl_dupfd_cloexec(&null, 3).unwrap())
                .collect();
            let dup = rustix::io::dup(&null).unwrap(); // no close-on-exec, above all of them
            let raw = dup.as_raw_fd();
            {
                let mut kept = FD_DIR.lock().unwrap_or_else(PoisonError::into_inner);
                let (_, open_fds) = usable(&mut kept).unwrap();
                let open_fds = open_fds.expect(
                    "precondition: st_size of /proc/self/fd counts open fds (Linux >= 6.2)",
                );
                assert!(open_fds > LISTING_LIMIT, "only {open_fds} fds open");
            }
            let slots = table_slots().unwrap();
            assert!(slots > raw, "FDSize {slots} but fd {raw} is open");
            assert!(any_in_slots(raw, slots));
            assert!(
                any_from(raw).unwrap(),
                "fd {raw} without close-on-exec not seen"
            );
            assert_eq!(any_from(3).unwrap(), oracle(3));
            rustix::io::fcntl_setfd(&dup, rustix::io::FdFlags::CLOEXEC).unwrap();
            assert!(!any_in_slots(raw, slots));
            assert_eq!(any_from(raw).unwrap(), oracle(raw));
            drop(many);
        }

        #[test]
        fn a_number_reused_behind_our_back_is_forgotten_not_closed() {
            let (pipe, _w) = rustix::pipe::pipe().unwrap();
            let foreign = rustix::io::dup(&pipe).unwrap();
            let number = foreign.as_raw_fd();
            let real = FdDir::open().unwrap();
            // Our record says "a /proc directory", the number now holds a pipe.
            let mut kept = Some(FdDir {
                fd: foreign,
                ..real
            });
            assert!(kept.as_ref().unwrap().open_fds_if_intact().is_err());
            let (fresh, _) = usable(&mut kept).unwrap();
            assert!(fresh.open_fds_if_intact().is_ok());
            assert_ne!(fresh.fd.as_raw_fd(), number);
            // Still open: the number is somebody else's, so we must not have closed it.
            let still = sys::own_raw_fd_for_test(number);
            assert!(
                rustix::io::fcntl_getfd(&still).is_ok(),
                "fd {number} was closed"
            );
        }

        #[test]
        fn a_handle_from_another_pid_is_replaced_by_our_own() {
            let inherited = FdDir {
                pid: 0,
                ..FdDir::open().unwrap()
            };
            let mut kept = Some(inherited);
            let (fresh, _) = usable(&mut kept).unwrap();
            assert_eq!(fresh.pid, std::process::id());
            assert!(fresh.open_fds_if_intact().is_ok());
        }
    }
}
