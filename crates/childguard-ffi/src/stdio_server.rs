//! The stdio-server face of the C API (issue 52 item 2): `cg_builder_new_stdio_server`, a
//! builder set up as `ChildHandle::stdio_server` is in Rust, and `cg_builder_passthrough`.

use std::ffi::c_char;

use childguard::{Capture, Containment, Ladder, SocketMode};

use crate::builder::{cg_builder, cg_builder_new};
use crate::error::{cg_status, guard_status};
use crate::ptr;

/// A new builder for a server that speaks over its stdin and stdout — an MCP server, a
/// language server — started directly or through a launcher (`npx -y pkg`, `uvx pkg`,
/// `sh -c "…"`), with the defaults of the Rust `ChildHandle::stdio_server` and the Python
/// `childguard.mcp` adapter (each can still be changed with the `cg_builder_*` setters):
///
/// - the channel: one `socketpair(2)` on the child's fds 0 and 1 (`CG_SOCKET_STDIO`; the C
///   API's one stdio channel), our end `cg_socket_fd()`; the close's `shutdown` is the EOF;
/// - stderr captured into the report's `output_tail` *and* passed on to our stderr line by
///   line as it comes (`[program pid] line`; `cg_builder_passthrough(b, false)`: the tail
///   only), as the MCP SDKs let a server's stderr through;
/// - the MCP close `EOF:2s,TERM:2s,KILL:5s` (`@mcp`): our end shut down (EOF), 2 s for the
///   server to exit, `SIGTERM`, 2 s, `SIGKILL`;
/// - the whole tree: a cgroup of its own when one can be made (`CG_CONTAIN_BEST_EFFORT`),
///   else a process group of its own (the report says which);
/// - gone with us (`cg_builder_exit_with_parent(b, true)`, Linux): if this process dies, even
///   by `SIGKILL`, the kernel kills the launcher and childguard's guardian the cgroup.
///
/// `argv`, errors, ownership and thread-safety as `cg_builder_new`.
#[no_mangle]
pub extern "C" fn cg_builder_new_stdio_server(argv: *const *const c_char) -> *mut cg_builder {
    let builder = cg_builder_new(argv);
    if builder.is_null() {
        return builder;
    }
    let status = guard_status("cg_builder_new_stdio_server", || {
        let b = ptr::borrow_mut(builder, "builder")?;
        b.socket = SocketMode::Stdio;
        b.ladder = Some(Ladder::mcp());
        b.capture = Some(Capture::stderr().passthrough(true));
        b.containment = Containment::BestEffort;
        b.process_group = true;
        // PR_SET_PDEATHSIG is Linux's; elsewhere the spawn would refuse it.
        b.exit_with_parent = cfg!(target_os = "linux");
        Ok(())
    });
    if status != cg_status::CG_OK {
        crate::builder::cg_builder_free(builder);
        return std::ptr::null_mut();
    }
    builder
}

/// Whether each captured line is also written to our stderr as it comes (`[program pid]
/// line`; on: the default of `cg_builder_new_stdio_server`, off elsewhere). Without a capture
/// yet, it captures stderr. The writes are made on the library's callback thread: a stderr
/// nobody drains blocks that thread only; lines that find its queue full are not written, and
/// the report's notes count them.
#[no_mangle]
pub extern "C" fn cg_builder_passthrough(builder: *mut cg_builder, on: bool) -> cg_status {
    guard_status("cg_builder_passthrough", || {
        let b = ptr::borrow_mut(builder, "builder")?;
        b.capture = Some(
            b.capture
                .take()
                .unwrap_or_else(Capture::stderr)
                .passthrough(on),
        );
        Ok(())
    })
}
