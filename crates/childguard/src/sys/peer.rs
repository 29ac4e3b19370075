//! Who sent a datagram on a Unix socket (Linux): the socket options that make the kernel
//! attach the sender to each datagram, the `recvmsg(2)` that reads what it attached, and the
//! pidfd calls that ask about the sender afterwards. Used by `readiness/notify_access.rs`.
//!
//! - `SO_PASSCRED` → `SCM_CREDENTIALS` (`unix(7)`): the sender's pid, uid, gid, as the kernel
//!   recorded them at `sendmsg` time (an unprivileged sender cannot forge them; a privileged
//!   one may name another pid — `systemd-notify` run as root names its parent).
//! - `SO_PASSPIDFD` (Linux 6.5) → `SCM_PIDFD`: a pidfd of that same sender, opened for us by
//!   the kernel at `recvmsg` time from the `struct pid` it pinned at send time. Before 6.16
//!   the kernel can only open it while the sender is not yet reaped (the cmsg then carries
//!   `-ESRCH`); from 6.16 on it pins the sender's pidfs entry when it sends, so a sender
//!   reaped before we read still arrives as a pidfd.
//! - `PIDFD_GET_INFO` (`ioctl`, Linux 6.13): pid, parent pid and cgroup id of the process a
//!   pidfd names, read by the kernel in one step; from 6.15 (`PIDFD_INFO_EXIT`) also the
//!   cgroup id a reaped process had when it was reaped.

use std::io;
use std::mem::{size_of, MaybeUninit};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// `SO_PASSPIDFD` (`asm-generic/socket.h`; parisc and sparc number it differently and are
/// left to `SO_PASSCRED` alone).
#[cfg(not(any(target_arch = "sparc64", target_arch = "sparc")))]
const SO_PASSPIDFD: libc::c_int = 76;
/// `SCM_PIDFD` (`asm-generic/socket.h`).
const SCM_PIDFD: libc::c_int = 0x04;

/// The most fds one `SCM_RIGHTS` message can carry (`SCM_MAX_FD`).
const SCM_MAX_FD: usize = 253;

/// `setsockopt(2)` `SO_PASSPIDFD` (Linux 6.5): every datagram received on `fd` from now on
/// carries an `SCM_PIDFD`. `ENOPROTOOPT` on older kernels.
pub(crate) fn set_pass_pidfd(fd: BorrowedFd<'_>) -> io::Result<()> {
    #[cfg(any(target_arch = "sparc64", target_arch = "sparc"))]
    {
        let _ = fd;
        Err(io::Error::from_raw_os_error(libc::ENOPROTOOPT))
    }
    #[cfg(not(any(target_arch = "sparc64", target_arch = "sparc")))]
    {
        let on: libc::c_int = 1;
        // SAFETY: `fd` is a socket we borrow for the call; the option value points to a live
        // `c_int` whose size we pass, which the kernel only reads.
        let rc = unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                SO_PASSPIDFD,
                (&on as *const libc::c_int).cast(),
                size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }
}

/// One datagram read by [`recv_with_sender`].
#[derive(Debug)]
pub(crate) struct Received {
    /// The datagram's full length (more than the buffer if it was truncated).
    pub(crate) len: usize,
    /// `SCM_CREDENTIALS`: the pid the kernel recorded at send time.
    pub(crate) pid: Option<u32>,
    /// `SCM_PIDFD`: `Ok` the sender's pidfd, `Err` the errno the kernel put in its place
    /// (`ESRCH`: the sender was reaped before we read, on kernels before 6.16).
    pub(crate) pidfd: Option<Result<OwnedFd, i32>>,
}

/// `recvmsg(2)` with `MSG_DONTWAIT | MSG_TRUNC | MSG_CMSG_CLOEXEC`: one datagram into `buf`,
/// and its `SCM_CREDENTIALS` and `SCM_PIDFD`. Fds sent with it (`SCM_RIGHTS`, e.g. with
/// `FDSTORE=1` or `BARRIER=1`) are closed here: we keep none, and closing is what releases a
/// sender waiting in `sd_notify_barrier(3)`. `EAGAIN`: nothing waiting.
pub(crate) fn recv_with_sender(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<Received> {
    // Room for credentials, a pidfd, and a full SCM_RIGHTS message (the kernel closes what
    // would not fit, and says MSG_CTRUNC; this buffer holds all three at their largest). u64s: cmsg headers need their alignment.
    const CONTROL: usize = 64 + 32 + SCM_MAX_FD * size_of::<libc::c_int>() + 64;
    let mut control = [0u64; CONTROL.div_ceil(8)];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: an all-zero msghdr is a valid "no name, no iov, no control" value.
    let mut msg: libc::msghdr = unsafe { MaybeUninit::zeroed().assume_init() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = size_of::<[u64; CONTROL.div_ceil(8)]>() as _;
    // SAFETY: `msg` points to one iovec over `buf` and to `control`, both live and writable
    // for their stated lengths for the whole call; the kernel writes at most those lengths.
    let n = unsafe {
        libc::recvmsg(
            fd.as_raw_fd(),
            &mut msg,
            libc::MSG_DONTWAIT | libc::MSG_TRUNC | libc::MSG_CMSG_CLOEXEC,
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut received = Received {
        len: n as usize,
        pid: None,
        pidfd: None,
    };
    // SAFETY: `msg` was filled in by a successful recvmsg: its msg_control/msg_controllen
    // describe the control data the kernel wrote into `control`, which the CMSG_* macros walk
    // without reading past msg_controllen.
    let mut cmsg = unsafe { libc::CMSG_FIRSTHDR(&msg) };
    while !cmsg.is_null() {
        // SAFETY: CMSG_FIRSTHDR/CMSG_NXTHDR returned a header that lies wholly inside the
        // control data; its data part starts at CMSG_DATA and is cmsg_len - CMSG_LEN(0) bytes
        // long, of which we read only whole values of the type the (level, type) pair fixes,
        // unaligned (the data is not guaranteed aligned for them).
        unsafe {
            let header = &*cmsg;
            let data = libc::CMSG_DATA(cmsg);
            let len = (header.cmsg_len as usize).saturating_sub(libc::CMSG_LEN(0) as usize);
            if header.cmsg_level == libc::SOL_SOCKET {
                match header.cmsg_type {
                    libc::SCM_CREDENTIALS if len >= size_of::<libc::ucred>() => {
                        let cred = data.cast::<libc::ucred>().read_unaligned();
                        received.pid = u32::try_from(cred.pid).ok().filter(|&p| p > 0);
                    }
                    SCM_PIDFD if len >= size_of::<libc::c_int>() => {
                        let raw = data.cast::<libc::c_int>().read_unaligned();
                        // A non-negative value is a new fd the kernel installed for us (and
                        // that we now own); a negative one is -errno, no fd.
                        received.pidfd = Some(if raw >= 0 {
                            Ok(OwnedFd::from_raw_fd(raw))
                        } else {
                            Err(-raw)
                        });
                    }
                    libc::SCM_RIGHTS => {
                        for i in 0..len / size_of::<libc::c_int>() {
                            let raw = data.cast::<libc::c_int>().add(i).read_unaligned();
                            // Each is a new fd installed for us: owned, and closed right here.
                            drop(OwnedFd::from_raw_fd(raw));
                        }
                    }
                    _ => {}
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    Ok(received)
}

/// `PIDFD_GET_INFO` (`include/uapi/linux/pidfd.h`): `_IOWR(0xFF, 11, struct pidfd_info)`.
const PIDFD_GET_INFO: libc::c_ulong = 0xC040_FF0B;
const PIDFD_INFO_PID: u64 = 1 << 0;
const PIDFD_INFO_CGROUPID: u64 = 1 << 2;
const PIDFD_INFO_EXIT: u64 = 1 << 3;

/// `struct pidfd_info`, its first published size (`PIDFD_INFO_SIZE_VER0`, 64 bytes).
#[repr(C)]
#[derive(Default)]
struct PidfdInfoRaw {
    mask: u64,
    cgroupid: u64,
    pid: u32,
    tgid: u32,
    ppid: u32,
    ruid: u32,
    rgid: u32,
    euid: u32,
    egid: u32,
    suid: u32,
    sgid: u32,
    fsuid: u32,
    fsgid: u32,
    exit_code: i32,
}

/// What `PIDFD_GET_INFO` said of a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PidfdInfo {
    /// Its pid and parent pid, while it is not reaped (a zombie still has both).
    pub(crate) pid_ppid: Option<(u32, u32)>,
    /// Its cgroup v2 id: the current one, or the one it had when it was reaped.
    pub(crate) cgroup_id: Option<u64>,
    /// It was reaped (Linux 6.15's exit information is present).
    pub(crate) reaped: bool,
}

/// `ioctl(2)` `PIDFD_GET_INFO` on a pidfd (Linux 6.13; `PIDFD_INFO_EXIT` 6.15). `ENOTTY` or
/// `EINVAL` on older kernels; `ESRCH` for a reaped process on kernels without exit info.
pub(crate) fn pidfd_get_info(pidfd: BorrowedFd<'_>) -> io::Result<PidfdInfo> {
    let mut raw = PidfdInfoRaw {
        mask: PIDFD_INFO_PID | PIDFD_INFO_CGROUPID | PIDFD_INFO_EXIT,
        ..PidfdInfoRaw::default()
    };
    // SAFETY: `pidfd` is borrowed for the call; the argument points to a live, writable
    // `struct pidfd_info` of exactly the size encoded in the request number, which the kernel
    // reads (`mask`) and fills in.
    let rc = unsafe {
        libc::ioctl(
            pidfd.as_raw_fd(),
            PIDFD_GET_INFO as _,
            &mut raw as *mut PidfdInfoRaw,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(PidfdInfo {
        pid_ppid: (raw.mask & PIDFD_INFO_PID != 0 && raw.pid != 0).then_some((raw.pid, raw.ppid)),
        cgroup_id: (raw.mask & PIDFD_INFO_CGROUPID != 0).then_some(raw.cgroupid),
        reaped: raw.mask & PIDFD_INFO_EXIT != 0,
    })
}

/// `pidfd_send_signal(2)` with signal 0: `Ok` while the process is not yet reaped (a zombie
/// counts, and `EPERM` — it exists but is not ours to signal — is `Ok` too), `ESRCH` once it
/// was. Nothing is sent.
pub(crate) fn pidfd_not_reaped(pidfd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: a pidfd borrowed for the call, signal 0 (only checks), no siginfo (null), flags
    // 0; the kernel touches no memory of ours.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            0 as libc::c_int,
            std::ptr::null::<libc::siginfo_t>(),
            0 as libc::c_uint,
        )
    };
    if rc == 0 {
        return Ok(());
    }
    match io::Error::last_os_error() {
        e if e.raw_os_error() == Some(libc::EPERM) => Ok(()),
        e => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn pidfd_info_of_a_child_names_it_and_us_then_its_reaping() {
        let mut child = std::process::Command::new("sleep")
            .arg("100")
            .spawn()
            .unwrap();
        let pid = child.id();
        let pidfd = rustix::process::pidfd_open(
            rustix::process::Pid::from_raw(pid as i32).unwrap(),
            rustix::process::PidfdFlags::empty(),
        )
        .unwrap();
        let info = pidfd_get_info(pidfd.as_fd()).expect("PIDFD_GET_INFO (Linux 6.13)");
        assert_eq!(info.pid_ppid, Some((pid, std::process::id())));
        let ours = std::fs::read_to_string("/proc/self/cgroup").unwrap();
        let path = ours.lines().find_map(|l| l.strip_prefix("0::")).unwrap();
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        let (root, mount) = crate::process::containment::mount::cgroup2_mount(&mountinfo).unwrap();
        let rel = path
            .strip_prefix(root.trim_end_matches('/'))
            .unwrap_or(path);
        let dir = mount.join(rel.trim_start_matches('/'));
        let ino = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&dir).unwrap());
        assert_eq!(
            info.cgroup_id,
            Some(ino),
            "cgroup id is the cgroup2 inode of {dir:?}"
        );
        assert!(!info.reaped);
        pidfd_not_reaped(pidfd.as_fd()).unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(
            pidfd_not_reaped(pidfd.as_fd()).unwrap_err().raw_os_error(),
            Some(libc::ESRCH)
        );
        let after = pidfd_get_info(pidfd.as_fd()).expect("PIDFD_INFO_EXIT (Linux 6.15)");
        assert!(after.reaped && after.pid_ppid.is_none(), "{after:?}");
        assert_eq!(after.cgroup_id, Some(ino));
    }
}
