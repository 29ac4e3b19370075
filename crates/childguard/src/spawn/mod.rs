//! What a spawn sets up before and after the fork: the command's stdio, socket activation,
//! the child's placement (process group, cgroup), output capture, the spawner threads (`exit_with_parent`'s, the small-table one), the
//! checks and debug form of the program. (The readiness waits work on a `ChildHandle`: they
//! are in `handle/readiness/`.)

pub(crate) mod activation;
pub(crate) mod capture;
#[cfg(target_os = "linux")]
pub(crate) mod clone3;
pub(crate) mod command_debug;
#[cfg(target_os = "linux")]
pub(crate) mod command_fields;
pub(crate) mod exec_check;
pub(crate) mod inheritable;
pub(crate) mod own_exec;
pub(crate) mod placing;
pub(crate) mod program;
#[cfg(feature = "tokio")]
pub(crate) mod shared_stdin;
#[cfg(target_os = "linux")]
pub(crate) mod small_table;
pub(crate) mod spawner;
pub(crate) mod stdio;
pub(crate) mod stdio_server;
