//! The C API of childguard: `libchildguard.so` / `libchildguard.a`, declared in
//! `include/childguard.h` (generated from this crate by cbindgen; a test fails when the
//! checked-in header is stale), found by `pkg-config --cflags --libs childguard`.
//!
//! It mirrors the Rust API: a builder (`cg_builder_*`), `cg_spawn` → a handle, `cg_socket_fd`,
//! `cg_pid`, `cg_kill`, `cg_try_wait` / `cg_wait_timeout`, `cg_close` → a report (a C struct,
//! and JSON), `cg_detach`, a free function for every object. Every entry point runs inside
//! `error::guard`: failures become a `cg_status` plus a per-thread message
//! (`cg_last_error_message`), and a panic is caught and becomes `CG_ERR_PANIC` — none unwinds
//! into C. No Rust type appears in the header: the
//! objects are opaque, the report is `#[repr(C)]`. `docs/embedding.md` walks through libnbd's
//! `nbd_connect_command` / `nbd_close` on top of it.

// Every dereference of a pointer from C is in `ptr`, one checked helper per kind of access.
// The entry-point modules allow `unsafe_code` for one thing only: `#[no_mangle]` (an unsafe
// attribute: an exported name could clash with another library's; ours all start with `cg_`).
// They hold no `unsafe` block.
#![deny(unsafe_code)]

#[allow(unsafe_code)]
pub mod builder;
#[allow(unsafe_code)]
pub mod cancel;
#[allow(unsafe_code)]
pub mod error;
#[allow(unsafe_code)]
pub mod handle;
#[allow(unsafe_code)]
mod ptr;
#[allow(unsafe_code)]
pub mod report;
#[allow(unsafe_code)]
pub mod stdio_server;
#[allow(unsafe_code)]
pub mod supervisor;

#[cfg(test)]
mod header;
