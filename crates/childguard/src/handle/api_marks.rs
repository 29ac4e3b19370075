//! The marks the public API carries, checked by the compiler (compiled as doctests only).
//!
//! Each `compile_fail` case below has a twin that compiles, so a typo cannot make a case pass:
//! only the mark under test separates the two.
//!
//! **`#[must_use]` on [`ChildHandle`](crate::ChildHandle).** `builder.spawn()?;` would drop the
//! handle at once, and the drop closes the child — blocking up to the whole ladder. It is a
//! warning (an error here, under `deny`):
//!
//! ```compile_fail
//! #![deny(unused_must_use)]
//! fn start() -> childguard::Result<()> {
//!     childguard::ChildHandle::builder(std::process::Command::new("true")).spawn()?;
//!     Ok(())
//! }
//! ```
//!
//! ```
//! #![deny(unused_must_use)]
//! fn start() -> childguard::Result<()> {
//!     let _server = childguard::ChildHandle::builder(std::process::Command::new("true")).spawn()?;
//!     Ok(())
//! }
//! ```
//!
//! **`#[must_use]` on [`CloseControl`](crate::CloseControl) and [`Capture`](crate::Capture)**:
//! both are builders that do nothing until handed on.
//!
//! ```compile_fail
//! #![deny(unused_must_use)]
//! childguard::CloseControl::new();
//! ```
//!
//! ```compile_fail
//! #![deny(unused_must_use)]
//! childguard::Capture::stderr().tail_lines(5);
//! ```
//!
//! ```
//! #![deny(unused_must_use)]
//! let _control = childguard::CloseControl::new();
//! let _capture = childguard::Capture::stderr().tail_lines(5);
//! ```
//!
//! **`#[non_exhaustive]` on every public report struct**: a new field is not a breaking
//! change, so code outside the crate cannot build one with a struct expression (E0639).
//!
//! ```compile_fail,E0639
//! let _ = childguard::CgroupReport {
//!     path: "/sys/fs/cgroup/x".into(),
//!     kill_mode: childguard::KillMode::Mixed,
//!     removed: true,
//!     members_left: 0,
//! };
//! ```
//!
//! ```compile_fail,E0639
//! use std::time::Duration;
//! let _ = childguard::Extension { at: Duration::ZERO, asked: Duration::ZERO };
//! ```
//!
//! ```compile_fail,E0639
//! let _ = childguard::NotifyReport {
//!     status: None,
//!     stopping: None,
//!     extensions: Vec::new(),
//!     ignored: Vec::new(),
//! };
//! ```
//!
//! Their fields stay readable by name:
//!
//! ```
//! fn describe(c: &childguard::CgroupReport, e: &childguard::Extension) -> String {
//!     format!("{} {:?} {} {} {:?} {:?}", c.path.display(), c.kill_mode, c.removed,
//!             c.members_left, e.at, e.asked)
//! }
//! ```
