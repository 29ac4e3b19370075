//! `childguard._native`: the extension module under the `childguard` Python package.
//!
//! Thin by design: it turns Python values into a [`childguard::Builder`], runs the blocking
//! calls (spawn with readiness, kill, wait, close) with the GIL released and Ctrl-C honoured
//! (`interrupt.rs`), closes what is still open at exit (`exit.rs`), and hands back plain values
//! (pids, fds, the report as its `Display` line and its serde JSON). The Pythonic layer — the
//! context manager, `socket.socket`, the report object, the exception classes, asyncio and the
//! pytest fixture — is `python/childguard/`, so that it reads and types like Python.

// No unsafe code: every system call is the childguard crate's.
#![forbid(unsafe_code)]

mod errors;
mod exit;
mod handle;
mod interrupt;
mod options;
mod plan;
mod stdio;
mod supervisor;

use pyo3::prelude::*;

/// The module `childguard._native`.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<handle::Handle>()?;
    m.add_class::<interrupt::Cancel>()?;
    m.add_class::<plan::Plan>()?;
    m.add_class::<supervisor::Supervised>()?;
    m.add_function(wrap_pyfunction!(plan::plan, m)?)?;
    m.add_function(wrap_pyfunction!(handle::spawn, m)?)?;
    m.add_function(wrap_pyfunction!(supervisor::supervise, m)?)?;
    m.add_function(wrap_pyfunction!(options::parse_ladder, m)?)?;
    m.add_function(wrap_pyfunction!(exit::drain_at_exit, m)?)?;
    m.add("DEFAULT_LADDER", childguard::Ladder::default().to_string())?;
    Ok(())
}
