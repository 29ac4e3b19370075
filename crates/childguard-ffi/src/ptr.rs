//! Every pointer the C caller hands us is read or written here, and nowhere else: one checked
//! helper per kind of access. This module holds all of the crate's `unsafe`.
//!
//! The contract each helper relies on is the one `include/childguard.h` states for the C
//! caller: a non-NULL pointer points to what the function's documentation says (a
//! NUL-terminated string, a NULL-terminated array of them, an object returned by this library
//! and not yet freed, writable memory for an out-parameter), and no other thread uses the same
//! object during the call. NULL is checked here, always, and becomes an error naming the
//! argument.

use std::ffi::{c_char, CStr, CString, OsStr};
use std::os::unix::ffi::OsStrExt;

use crate::error::{cg_status, Failure};

/// A C string argument, as bytes borrowed for the call. NULL is an error naming `what`.
pub(crate) fn c_str<'a>(p: *const c_char, what: &str) -> Result<&'a CStr, Failure> {
    if p.is_null() {
        return Err(Failure::null(what));
    }
    // SAFETY: non-NULL, and the header requires a NUL-terminated string that stays valid and
    // unchanged for the call; the borrow does not outlive the call (the callers copy).
    Ok(unsafe { CStr::from_ptr(p) })
}

/// A C string argument as an `OsStr` (paths, argv, environment: any bytes but NUL).
pub(crate) fn os_str<'a>(p: *const c_char, what: &str) -> Result<&'a OsStr, Failure> {
    c_str(p, what).map(|s| OsStr::from_bytes(s.to_bytes()))
}

/// A C string argument that must be UTF-8 (ladders, names, addresses).
pub(crate) fn utf8<'a>(p: *const c_char, what: &str) -> Result<&'a str, Failure> {
    c_str(p, what)?.to_str().map_err(|e| {
        Failure::new(
            cg_status::CG_ERR_INVALID_ARGUMENT,
            format!("{what} is not UTF-8: {e}"),
        )
    })
}

/// A NULL-terminated array of C strings (`argv`), copied.
pub(crate) fn string_array(p: *const *const c_char, what: &str) -> Result<Vec<CString>, Failure> {
    if p.is_null() {
        return Err(Failure::null(what));
    }
    let mut out = Vec::new();
    for index in 0.. {
        // SAFETY: the header requires a NULL-terminated array: every element up to and
        // including the first NULL is readable, and we stop at that NULL.
        let item = unsafe { *p.add(index) };
        if item.is_null() {
            break;
        }
        out.push(c_str(item, what)?.to_owned());
    }
    Ok(out)
}

/// Moves `value` to the heap and gives its ownership to the C caller.
pub(crate) fn give<T>(value: T) -> *mut T {
    Box::into_raw(Box::new(value))
}

/// Takes back ownership of an object made by [`give`]. NULL is an error naming `what`.
pub(crate) fn take<T>(p: *mut T, what: &str) -> Result<Box<T>, Failure> {
    if p.is_null() {
        return Err(Failure::null(what));
    }
    // SAFETY: non-NULL, and the header requires an object returned by this library (made by
    // `give`, i.e. `Box::into_raw`) and not freed yet; the caller gives it up with this call.
    Ok(unsafe { Box::from_raw(p) })
}

/// Borrows an object made by [`give`] for the call.
pub(crate) fn borrow_mut<'a, T>(p: *mut T, what: &str) -> Result<&'a mut T, Failure> {
    // SAFETY: `as_mut` is NULL-checked; a non-NULL pointer is, per the header, an object made
    // by `give` and not freed, used by no other thread during this call.
    unsafe { p.as_mut() }.ok_or_else(|| Failure::null(what))
}

/// Borrows an object made by [`give`] for the call, read-only.
pub(crate) fn borrow<'a, T>(p: *const T, what: &str) -> Result<&'a T, Failure> {
    // SAFETY: as `borrow_mut`; shared borrows only, so concurrent readers are allowed.
    unsafe { p.as_ref() }.ok_or_else(|| Failure::null(what))
}

/// Borrows an object made by [`give`], `None` for NULL — without making an error (no
/// allocation: `cg_cancel_set` runs in signal handlers).
pub(crate) fn borrow_or_none<'a, T>(p: *const T) -> Option<&'a T> {
    // SAFETY: as `borrow`: a non-NULL `p` was made by `give` and not freed (the caller's
    // contract), so it points to a live `T`; only shared references are made.
    unsafe { p.as_ref() }
}

/// Writes an optional out-parameter (NULL: the caller does not want it).
pub(crate) fn put<T>(p: *mut T, value: T) {
    if !p.is_null() {
        // SAFETY: non-NULL, and the header requires writable memory for a `T`; `write` does
        // not read or drop the old contents (they may be uninitialised).
        unsafe { p.write(value) };
    }
}

/// Gives a string to the C caller (freed by [`free_string`]).
pub(crate) fn give_string(s: CString) -> *mut c_char {
    s.into_raw()
}

/// Frees a string made by [`give_string`]; NULL is a no-op.
pub(crate) fn free_string(p: *mut c_char) {
    if !p.is_null() {
        // SAFETY: the header requires a string returned by this library's functions that say
        // "free with cg_string_free" (made by `CString::into_raw`), not freed yet.
        drop(unsafe { CString::from_raw(p) });
    }
}

/// Takes back a report: the C caller holds a pointer to the `public` part, the first field of
/// the `#[repr(C)]` [`crate::report::Owned`] that also keeps the memory it points into.
pub(crate) fn take_report(
    p: *mut crate::report::cg_report,
    what: &str,
) -> Result<Box<crate::report::Owned>, Failure> {
    take(p.cast::<crate::report::Owned>(), what)
}

/// Borrows a report (see [`take_report`]).
pub(crate) fn borrow_report<'a>(
    p: *const crate::report::cg_report,
    what: &str,
) -> Result<&'a crate::report::Owned, Failure> {
    borrow(p.cast::<crate::report::Owned>(), what)
}
