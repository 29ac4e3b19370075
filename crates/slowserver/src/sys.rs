//! The only module with `unsafe` code: one thin safe wrapper per syscall.
//!
//! Every other module is compiled under `#![deny(unsafe_code)]` (set in
//! `main.rs`); this one opts out, and each `unsafe` block says why it holds.

#![allow(unsafe_code)]

use std::io;
use std::ptr::{self, NonNull};

use libc::c_int;

/// What a signal does when it arrives, for [`set_disposition`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    /// `SIG_IGN`: the signal is discarded.
    Ignore,
    /// `SIG_DFL`: the signal's default action (for most: terminate).
    Default,
}

/// Sets the disposition of `signo` to `SIG_IGN` or `SIG_DFL`; see signal(2).
///
/// Only these two dispositions are offered, so none of signal(2)'s
/// portability caveats about handler functions apply.
pub fn set_disposition(signo: c_int, disposition: Disposition) -> io::Result<()> {
    let handler = match disposition {
        Disposition::Ignore => libc::SIG_IGN,
        Disposition::Default => libc::SIG_DFL,
    };
    // SAFETY: `handler` is SIG_IGN or SIG_DFL, not a function pointer, so no
    // code of ours ever runs in signal context; signal(2) only changes kernel
    // state and reports a bad `signo` as SIG_ERR/EINVAL.
    let previous = unsafe { libc::signal(signo, handler) };
    if previous == libc::SIG_ERR {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A private, anonymous, read-write memory mapping, unmapped on drop.
#[derive(Debug)]
pub struct AnonMapping {
    ptr: NonNull<u8>,
    len: usize,
}

impl AnonMapping {
    /// Maps `len` bytes of fresh zero-filled memory; see mmap(2)
    /// (`MAP_PRIVATE | MAP_ANONYMOUS`, `PROT_READ | PROT_WRITE`).
    pub fn new(len: usize) -> io::Result<Self> {
        if len == 0 {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        // SAFETY: with a null address hint (no MAP_FIXED), fd -1 and offset 0
        // the kernel picks a fresh range that overlaps no existing mapping,
        // so no memory Rust already owns is affected.
        let addr = unsafe {
            libc::mmap(
                ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(addr.cast::<u8>())
            .ok_or_else(|| io::Error::other("mmap returned a null address"))?;
        Ok(Self { ptr, len })
    }

    /// The whole mapping as a byte slice (no syscall; touching it faults
    /// pages in).
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: `ptr` is the start of `len` bytes mapped readable and
        // writable by `new`, which stay mapped until `drop`; anonymous memory
        // is zero-filled, so every byte is an initialised `u8`; and `&mut self`
        // makes this slice the only access for its lifetime.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// Asks for transparent huge pages on the mapping; see madvise(2)
    /// (`MADV_HUGEPAGE`). Fails with `EINVAL` where THP is not available.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    pub fn advise_hugepage(&mut self) -> io::Result<()> {
        // SAFETY: the range is exactly this mapping (page-aligned start from
        // mmap, our own length), and MADV_HUGEPAGE is only advice: it never
        // changes the contents or validity of the memory.
        let rc = unsafe { libc::madvise(self.ptr.as_ptr().cast(), self.len, libc::MADV_HUGEPAGE) };
        if rc == -1 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

impl Drop for AnonMapping {
    /// Unmaps the memory; see munmap(2).
    fn drop(&mut self) {
        // SAFETY: the range is exactly the mapping made by `new`, unmapped
        // only here; no slice from `as_mut_slice` can outlive this `&mut self`,
        // and nothing uses `ptr` after drop. An error would leave the memory
        // mapped, which is harmless, so it is ignored.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

/// `setsid(2)`: a new session and process group led by the caller (which must not lead a
/// group already).
pub fn new_session() -> io::Result<()> {
    // SAFETY: setsid takes no arguments and only changes our session and group ids.
    if unsafe { libc::setsid() } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
