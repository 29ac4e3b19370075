//! [`TrustedDir`]: the base directory a private socket directory is made in, opened once and
//! judged by what the kernel says of the open directory, never by its path again.
//!
//! Who may be hostile here: another local user who owns, or can write to, a directory on the
//! way to the base (a `XDG_RUNTIME_DIR` that `su` without `-` kept from that user; a
//! `runtime_dir` under someone's home). Such a user can rename our entries aside, replace them
//! with symlinks, or bind a socket of their own at our path, so root's `chmod`, `chown`, `bind`
//! or `unlink` by path would land wherever they like (issue 49).
//!
//! The rule, as systemd's `chase(CHASE_SAFE)` and OpenSSH's `safe_path` apply it: the base is
//! resolved (symlinks, `..`) once, then walked from `/` one component at a time with
//! `openat(O_DIRECTORY|O_NOFOLLOW)`, and each directory must be one that nobody but root and us
//! can change: owned by root or by our effective uid, and not writable by group or others
//! unless it is sticky (in a sticky directory such as `/tmp` the kernel lets nobody else rename
//! or remove our entries). The base itself must be ours and not writable by group or others,
//! or a sticky directory of root's or ours (`/tmp`). Every later step — `mkdirat`, `openat`,
//! `unlinkat` — is relative to the fd this walk ends with.
//!
//! Races avoided:
//! - **A component swapped for a symlink during the walk**: `O_NOFOLLOW` on each step fails
//!   (`ELOOP`/`ENOTDIR`) instead of following it.
//! - **A component swapped after the walk**: nobody but root and us can change any directory
//!   on the path (that is what the walk checked), so the path we hand to the child
//!   (`NOTIFY_SOCKET`) still names the directory we hold.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use rustix::fs::{Mode, OFlags};

/// A directory that only root and our effective uid can change, open.
#[derive(Debug)]
pub(crate) struct TrustedDir {
    /// Its resolved absolute path (no symlink, no `.` or `..`): what a child is told.
    path: PathBuf,
    fd: OwnedFd,
}

impl TrustedDir {
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// The open directory, for whoever keeps working in it.
    pub(crate) fn into_fd(self) -> OwnedFd {
        self.fd
    }
}

/// Where the base came from: an explicit `runtime_dir` (refused if unsafe) or the default
/// (`XDG_RUNTIME_DIR` passed over for `/tmp` if unsafe).
pub(crate) fn open_base(runtime_dir: Option<&Path>) -> io::Result<TrustedDir> {
    match runtime_dir {
        Some(dir) => open_explicit(dir),
        None => open_default(),
    }
}

/// `runtime_dir(..)`: made absolute, resolved, then opened by [`open_trusted`]. An unsafe one
/// is an error that names the directory, its owner and its mode — never a silent fallback.
fn open_explicit(dir: &Path) -> io::Result<TrustedDir> {
    if dir.as_os_str().is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "runtime_dir is empty: name a directory",
        ));
    }
    // InvalidInput: a runtime_dir that cannot be used is the caller's configuration
    // (`ErrorKind::Config`), whatever the kernel said of it.
    let resolved = std::fs::canonicalize(dir).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("runtime_dir {}: cannot resolve it: {e}", dir.display()),
        )
    })?;
    open_trusted(&resolved).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("runtime_dir {} refused: {e}", dir.display()),
        )
    })
}

/// `$XDG_RUNTIME_DIR` when it passes the check, else `/tmp` (which must).
fn open_default() -> io::Result<TrustedDir> {
    if let Some(xdg) = std::env::var_os("XDG_RUNTIME_DIR").filter(|v| !v.is_empty()) {
        let xdg = PathBuf::from(xdg);
        let opened = if xdg.is_absolute() {
            std::fs::canonicalize(&xdg).and_then(|resolved| open_trusted(&resolved))
        } else {
            Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not an absolute path",
            ))
        };
        match opened {
            Ok(dir) => return Ok(dir),
            Err(_e) => crate::base::trace::runtime_dir_passed_over(&xdg, &_e),
        }
    }
    // Resolved first: on macOS `/tmp` is a symlink to `/private/tmp`.
    std::fs::canonicalize("/tmp")
        .and_then(|tmp| open_trusted(&tmp))
        .map_err(|e| io::Error::new(e.kind(), format!("/tmp refused: {e}")))
}

/// Walks `path` (absolute, already resolved) from `/` with `openat(O_DIRECTORY|O_NOFOLLOW)`,
/// judging each directory by `fstat` of the fd just opened.
pub(crate) fn open_trusted(path: &Path) -> io::Result<TrustedDir> {
    let me = rustix::process::geteuid().as_raw();
    let mut fd = rustix::fs::open("/", walk_flags(), Mode::empty())?;
    let mut walked = PathBuf::from("/");
    let components: Vec<Component<'_>> = path.components().collect();
    if components.first() != Some(&Component::RootDir) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is not an absolute, resolved path", path.display()),
        ));
    }
    let last = components.len() - 1;
    for (i, component) in components.iter().enumerate() {
        let name = match component {
            Component::RootDir => None,
            Component::Normal(name) => Some(*name),
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{} is not a resolved path", path.display()),
                ))
            }
        };
        if let Some(name) = name {
            walked.push(name);
            fd = rustix::fs::openat(&fd, name, walk_flags(), Mode::empty()).map_err(|e| {
                io::Error::new(
                    io::Error::from(e).kind(),
                    format!(
                        "opening {} (not following a symlink): {e}",
                        walked.display()
                    ),
                )
            })?;
        }
        let stat = rustix::fs::fstat(&fd)?;
        judge(&walked, stat.st_uid, stat.st_mode as u32, me, i == last)?;
    }
    Ok(TrustedDir { path: walked, fd })
}

/// The flags of each step of the walk: a directory, never through a symlink, not inherited.
/// `O_PATH` on Linux, so a directory we may only search (mode 0711) can be walked through.
fn walk_flags() -> OFlags {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    let access = OFlags::PATH;
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    let access = OFlags::RDONLY;
    access | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

const STICKY: u32 = 0o1000;
const GROUP_OR_OTHER_WRITE: u32 = 0o022;

/// Whether a directory owned by `uid` with `mode` can be changed by nobody but root and `me`.
/// `base`: the directory itself, which must moreover be ours unless it is sticky.
fn judge(path: &Path, uid: u32, mode: u32, me: u32, base: bool) -> io::Result<()> {
    let writable_by_others = mode & GROUP_OR_OTHER_WRITE != 0;
    let sticky = mode & STICKY != 0;
    let owner_ok = uid == me || uid == 0;
    let ok = if base {
        (uid == me && !writable_by_others) || (owner_ok && sticky)
    } else {
        owner_ok && (!writable_by_others || sticky)
    };
    if ok {
        return Ok(());
    }
    let why = if !owner_ok {
        format!("it is owned by uid {uid}, neither root nor us (uid {me})")
    } else if base && !sticky && writable_by_others {
        "it is writable by group or others".to_string()
    } else if base {
        format!("it is owned by uid {uid}, not by us (uid {me})")
    } else {
        "it is writable by group or others and not sticky".to_string()
    };
    Err(io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!(
            "{} (owner uid {uid}, mode {:04o}) is not safe to make a private socket directory \
             under: {why}; another user could replace what childguard makes there",
            path.display(),
            mode & 0o7777
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn judge_follows_the_rule() {
        let p = Path::new("/x");
        // The base: ours and private, or a sticky directory of root's or ours.
        assert!(judge(p, 1000, 0o700, 1000, true).is_ok());
        assert!(judge(p, 0, 0o1777, 1000, true).is_ok());
        assert!(judge(p, 1000, 0o1777, 1000, true).is_ok());
        assert!(judge(p, 0, 0o755, 0, true).is_ok());
        // Root's non-sticky directory is not a user's base.
        assert!(judge(p, 0, 0o755, 1000, true).is_err());
        // Someone else's, whatever the mode.
        let err = judge(p, 1001, 0o700, 0, true).unwrap_err();
        assert!(err.to_string().contains("owned by uid 1001"), "{err}");
        assert!(err.to_string().contains("mode 0700"), "{err}");
        assert!(judge(p, 1001, 0o1777, 0, true).is_err());
        // Ours but writable by others, not sticky.
        let err = judge(p, 0, 0o777, 0, true).unwrap_err();
        assert!(
            err.to_string().contains("writable by group or others"),
            "{err}"
        );
        // On the way: root's or ours, private or sticky.
        assert!(judge(p, 0, 0o755, 1000, false).is_ok());
        assert!(judge(p, 0, 0o1777, 1000, false).is_ok());
        assert!(judge(p, 1001, 0o755, 1000, false).is_err());
        assert!(judge(p, 0, 0o775, 1000, false).is_err());
    }

    #[test]
    fn tmp_is_trusted_and_resolved() {
        let tmp = open_trusted(Path::new("/tmp")).unwrap();
        assert_eq!(tmp.path(), Path::new("/tmp"));
    }

    #[test]
    fn a_symlink_on_the_way_is_refused() {
        let top = std::env::temp_dir().join(format!("cg-trusted-{}", std::process::id()));
        std::fs::create_dir_all(top.join("real")).unwrap();
        let link = top.join("link");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(top.join("real"), &link).unwrap();
        assert!(open_trusted(&link).is_err());
        // Resolved first, an explicit runtime_dir through the symlink is the real directory.
        let opened = open_explicit(&link).unwrap();
        assert_eq!(
            opened.path(),
            std::fs::canonicalize(top.join("real")).unwrap()
        );
        std::fs::remove_dir_all(&top).unwrap();
    }

    #[test]
    fn a_relative_explicit_dir_is_resolved() {
        // `../../…/tmp/cg-…` from the current directory: as deep as the checkout is.
        let made = std::env::temp_dir().join(format!("cg-relative-{}", std::process::id()));
        std::fs::create_dir_all(&made).unwrap();
        let made = std::fs::canonicalize(&made).unwrap();
        let depth = std::env::current_dir().unwrap().components().count() - 1;
        let mut relative = PathBuf::new();
        for _ in 0..depth {
            relative.push("..");
        }
        relative.push(made.strip_prefix("/").unwrap());
        let opened = open_explicit(&relative).unwrap();
        assert_eq!(opened.path(), made.as_path());
        std::fs::remove_dir(&made).unwrap();
    }
}
