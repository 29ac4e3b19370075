//! File descriptors: whether one would reach a spawned program, and tokio registration.

#[cfg(feature = "tokio")]
use std::io;

/// `fcntl(2)` `F_GETFD` on an fd number read from the fd table: its flags, or `None` if the
/// number is not open.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn fd_flags(fd: i32) -> Option<libc::c_int> {
    // SAFETY: F_GETFD only reads the flags of whatever the number holds; a number that is not
    // open (or was closed meanwhile by another thread) fails with EBADF.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    (flags >= 0).then_some(flags)
}

/// A close-on-exec copy (`fcntl(2)` `F_DUPFD_CLOEXEC`) of the fd number `fd`, if it is open
/// (`None` for -1 or a closed number).
#[cfg(target_os = "linux")]
pub(crate) fn dup_open_fd(fd: i32) -> Option<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    if fd < 0 {
        return None;
    }
    // SAFETY: F_DUPFD_CLOEXEC makes a new fd; a number that is not open fails with EBADF.
    let copy = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
    // SAFETY: `copy` was just made by the call above and is owned by nothing else.
    (copy >= 0).then(|| unsafe { std::os::fd::OwnedFd::from_raw_fd(copy) })
}

/// Whether fd `fd` is open and without close-on-exec, i.e. a spawned program would inherit
/// it. Used by [`crate::spawn::inheritable`].
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) fn is_inheritable(fd: i32) -> bool {
    fd_flags(fd).is_some_and(|flags| flags & libc::FD_CLOEXEC == 0)
}

/// Tests only: takes ownership of an open fd number nobody owns (one a test saw forgotten).
#[cfg(all(test, any(target_os = "linux", target_os = "android")))]
pub(crate) fn own_raw_fd_for_test(fd: i32) -> std::os::fd::OwnedFd {
    use std::os::fd::FromRawFd;
    assert!(fd_flags(fd).is_some(), "fd {fd} is not open");
    // SAFETY: test code passes a number it knows is open and that no owner will close.
    unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) }
}

/// Registers `fd` for readability with the current tokio runtime's IO driver (the tokio face
/// waits on pidfds this way). Fails outside a runtime or when its IO driver is disabled.
#[cfg(feature = "tokio")]
pub(crate) fn async_readable(
    fd: std::os::fd::OwnedFd,
) -> io::Result<::tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>> {
    use ::tokio::io::unix::AsyncFd;
    if ::tokio::runtime::Handle::try_current().is_err() {
        return Err(io::Error::other("not inside a tokio runtime"));
    }
    // SAFETY: the AsyncFd owns `fd` for its whole life and we never reach it mutably, so the
    // raw fd stays open and names the same file description until the AsyncFd deregisters it
    // on drop, which is all `register_with_interest` asks.
    let registered =
        unsafe { AsyncFd::register_with_interest(fd, ::tokio::io::Interest::READABLE) };
    registered.map_err(io::Error::from)
}

/// Registers our end of a pipe with the current tokio runtime's IO driver for `interest`
/// (the async stdio halves, `crate::tokio`). Fails outside a runtime or when its IO driver is
/// disabled.
#[cfg(feature = "tokio")]
pub(crate) fn async_fd(
    fd: std::sync::Arc<std::os::fd::OwnedFd>,
    interest: ::tokio::io::Interest,
) -> io::Result<::tokio::io::unix::AsyncFd<std::sync::Arc<std::os::fd::OwnedFd>>> {
    use ::tokio::io::unix::AsyncFd;
    if ::tokio::runtime::Handle::try_current().is_err() {
        return Err(io::Error::other("not inside a tokio runtime"));
    }
    // SAFETY: the AsyncFd owns one reference to the `Arc`, so the `OwnedFd` inside — and with
    // it the raw fd, which an `OwnedFd` never changes — stays open and names the same file
    // description until the AsyncFd is dropped, which deregisters it first. That is all
    // `register_with_interest` asks.
    let registered = unsafe { AsyncFd::register_with_interest(fd, interest) };
    registered.map_err(io::Error::from)
}
