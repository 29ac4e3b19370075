//! [`SocketDir`]: a private directory (a random name) holding one socket file, both removed on
//! drop. Socket activation's listening socket and `Ready::Notify`'s `NOTIFY_SOCKET` are made in
//! one. Moved out of `spawn/activation.rs` by the layering (issue 21 item 5): the notify socket
//! is also heard during a close, below `spawn/`.
//!
//! Everything after the base directory's first `open` is relative to a file descriptor
//! (issue 49; see docs/security.md):
//!
//! 1. the base is opened and judged by [`trusted_dir`](super::trusted_dir) (ours, or a sticky
//!    directory of root's such as `/tmp`; nothing on the way another user can change);
//! 2. `mkdirat(base, "childguard-XXXXXXXXXXXX", 0700)`, then at once
//!    `openat(base, name, O_DIRECTORY|O_NOFOLLOW)` and `fstat`: a directory, ours, no more
//!    than the mode we asked; `fchmod` sets the mode exactly (the umask may have taken bits);
//! 3. the socket is bound through `/proc/self/fd/N/sock` (Linux), a path that names the
//!    directory we hold whatever happened to its name, then checked with
//!    `fstatat(dir, "sock", AT_SYMLINK_NOFOLLOW)`: a socket, ours;
//! 4. for a child of another user ([`SocketDir::give_socket_to`]): `fchmodat(dir, "sock",
//!    0600)` and `fchownat(dir, "sock", uid, gid, AT_SYMLINK_NOFOLLOW)` — the socket only; the
//!    directory stays ours, mode 0711, so the owner can reach the socket by its name and list
//!    nothing, and no other user ever owns a directory we keep working in;
//! 5. removal: `unlinkat(dir, "sock")`, then `unlinkat(base, name, AT_REMOVEDIR)`.
//!
//! Race avoided: **the directory swapped between `mkdirat` and `openat`** needs a base another
//! user can change, which step 1 refused; the `fstat` of step 2 checks it all the same.

use std::hash::{BuildHasher, Hasher};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};

use super::trusted_dir::TrustedDir;

/// `sizeof(sockaddr_un.sun_path)` on Linux, the NUL included.
const SUN_PATH_MAX: usize = 108;

/// The socket file's name inside the private directory.
const SOCKET_NAME: &str = "sock";

/// Prefix of the private directory's name.
pub(crate) const DIR_PREFIX: &str = "childguard-";

/// Hex digits of randomness in the directory name.
const SUFFIX_LEN: usize = 12;

/// The private directory's mode: ours alone.
const PRIVATE: u32 = 0o700;
/// Its mode once the socket is given to another user: they may pass (to reach `sock` by its
/// name), not list or write. (`Ready::Notify`, the one user of it, is Linux-only.)
#[cfg(any(target_os = "linux", test))]
const PASSABLE: u32 = 0o711;

/// `mode` as rustix's `Mode` (`mode_t` is 16 bits on macOS and FreeBSD; our modes fit).
fn as_mode(bits: u32) -> Mode {
    Mode::from_bits_truncate(bits as _)
}

/// The private directory and the socket file in it. Both are removed on drop.
#[derive(Debug)]
pub(crate) struct SocketDir {
    /// The base directory, for the directory's removal.
    base: OwnedFd,
    /// The directory's name in the base.
    name: String,
    /// The directory itself.
    dir: OwnedFd,
    /// The socket's path as others (the child) reach it.
    path: PathBuf,
    removed: bool,
}

impl SocketDir {
    /// The socket's path, as a child is told it (`NOTIFY_SOCKET`, `socket_path()`).
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The path to bind or connect to from this process: through `/proc/self/fd/N`, which
    /// names the directory we hold whatever happened to its name (Linux); elsewhere the path.
    pub(crate) fn local_path(&self) -> PathBuf {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        {
            use std::os::fd::AsRawFd;
            let via_fd = PathBuf::from(format!("/proc/self/fd/{}", self.dir.as_raw_fd()));
            // Without a /proc (a bare chroot) the path is all there is; `check_socket` still
            // proves after the bind that the socket is in our directory.
            if via_fd.is_dir() {
                return via_fd.join(SOCKET_NAME);
            }
        }
        self.path.clone()
    }

    /// After the bind: the socket file is in the directory we hold (not wherever a path led),
    /// a socket, and ours.
    pub(crate) fn check_socket(&self) -> io::Result<()> {
        let stat =
            rustix::fs::statat(&self.dir, SOCKET_NAME, AtFlags::SYMLINK_NOFOLLOW).map_err(|e| {
                io::Error::new(
                    io::Error::from(e).kind(),
                    format!("the socket just bound is not in {}: {e}", self.dir_path()),
                )
            })?;
        let me = rustix::process::geteuid().as_raw();
        if FileType::from_raw_mode(stat.st_mode as _) != FileType::Socket || stat.st_uid != me {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!(
                    "{} is not the socket we bound (type {:?}, owner uid {})",
                    self.path.display(),
                    FileType::from_raw_mode(stat.st_mode as _),
                    stat.st_uid
                ),
            ));
        }
        Ok(())
    }

    #[cfg(any(target_os = "linux", test))]
    /// For a child that runs as `uid:gid`: the socket (mode 0600) becomes theirs, and the
    /// directory — still ours — lets them pass (0711). Never by path: the socket by its name
    /// in the directory we hold, not following a symlink; the directory by its fd.
    pub(crate) fn give_socket_to(&self, uid: u32, gid: u32) -> io::Result<()> {
        let named = |what: &str, e: rustix::io::Errno| {
            io::Error::new(
                io::Error::from(e).kind(),
                format!("{what} {} to {uid}:{gid}: {e}", self.path.display()),
            )
        };
        rustix::fs::chmodat(&self.dir, SOCKET_NAME, as_mode(0o600), AtFlags::empty())
            .map_err(|e| named("chmod 0600 of", e))?;
        rustix::fs::chownat(
            &self.dir,
            SOCKET_NAME,
            Some(rustix::fs::Uid::from_raw(uid)),
            Some(rustix::fs::Gid::from_raw(gid)),
            AtFlags::SYMLINK_NOFOLLOW,
        )
        .map_err(|e| named("chown of", e))?;
        rustix::fs::fchmod(&self.dir, as_mode(PASSABLE))
            .map_err(|e| named("chmod 0711 of the directory of", e))
    }

    /// Removes the socket file, then the directory. A missing entry is not an error.
    pub(crate) fn remove(mut self) -> io::Result<()> {
        self.remove_both()
    }

    fn remove_both(&mut self) -> io::Result<()> {
        if self.removed {
            return Ok(());
        }
        self.removed = true;
        let file = ignore_missing(rustix::fs::unlinkat(
            &self.dir,
            SOCKET_NAME,
            AtFlags::empty(),
        ));
        let dir = ignore_missing(rustix::fs::unlinkat(
            &self.base,
            self.name.as_str(),
            AtFlags::REMOVEDIR,
        ));
        file.and(dir)
    }

    fn dir_path(&self) -> String {
        self.path
            .parent()
            .map_or_else(String::new, |p| p.display().to_string())
    }
}

impl Drop for SocketDir {
    fn drop(&mut self) {
        let _ = self.remove_both();
    }
}

fn ignore_missing(r: rustix::io::Result<()>) -> io::Result<()> {
    match r {
        Err(rustix::io::Errno::NOENT) => Ok(()),
        other => other.map_err(io::Error::from),
    }
}

/// Random hex digits for a directory name (std's per-process random SipHash keys, mixed with
/// the time and a counter; `mkdirat` fails on any existing entry, so a guess costs an
/// attacker nothing but a retry of ours).
fn random_suffix() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    if let Ok(t) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        h.write_u128(t.as_nanos());
    }
    let hex = format!("{:016x}", h.finish());
    hex[..SUFFIX_LEN].to_string()
}

/// mkdtemp by fd: a new directory `base/childguard-XXXXXXXXXXXX`, mode 0700, open. The base's
/// fd is kept by the [`SocketDir`], for the directory's removal.
pub(crate) fn make_private_dir(base: TrustedDir) -> io::Result<SocketDir> {
    let failed = |what: &str, e: io::Error| {
        io::Error::new(
            e.kind(),
            format!(
                "{what} a private directory in {}: {e}",
                base.path().display()
            ),
        )
    };
    for _ in 0..100 {
        let name = format!("{DIR_PREFIX}{}", random_suffix());
        match rustix::fs::mkdirat(base.fd(), name.as_str(), as_mode(PRIVATE)) {
            Ok(()) => {}
            Err(rustix::io::Errno::EXIST) => continue,
            Err(e) => return Err(failed("creating", e.into())),
        }
        return match open_made(&base, &name) {
            Ok(dir) => Ok(SocketDir {
                path: base.path().join(&name).join(SOCKET_NAME),
                base: base.into_fd(),
                name,
                dir,
                removed: false,
            }),
            Err(e) => {
                // Ours by name in a base nobody else can change (it was judged so).
                let _ = rustix::fs::unlinkat(base.fd(), name.as_str(), AtFlags::REMOVEDIR);
                Err(failed("opening", e))
            }
        };
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        format!(
            "no free directory name in {} after 100 tries",
            base.path().display()
        ),
    ))
}

/// The directory just made, opened without following a symlink and checked: a directory,
/// ours, no bit beyond 0700 (the umask can only take bits away); then its mode set exactly.
fn open_made(base: &TrustedDir, name: &str) -> io::Result<OwnedFd> {
    let dir = rustix::fs::openat(
        base.fd(),
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let stat = rustix::fs::fstat(&dir)?;
    let me = rustix::process::geteuid().as_raw();
    let mode = stat.st_mode as u32 & 0o7777;
    // The set-group-ID bit comes from a setgid base; the fchmod below clears it.
    if stat.st_uid != me || mode & !(PRIVATE | 0o2000) != 0 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{name} is not the directory we made (owner uid {}, mode {mode:04o})",
                stat.st_uid
            ),
        ));
    }
    rustix::fs::fchmod(dir.as_fd(), as_mode(PRIVATE))?;
    Ok(dir)
}

/// The path the socket will have under `base`, with the random part as placeholders.
fn socket_path_len(base: &Path) -> usize {
    base.join(format!("{DIR_PREFIX}{}", "x".repeat(SUFFIX_LEN)))
        .join(SOCKET_NAME)
        .as_os_str()
        .len()
}

/// The socket's path (what the child is told) must fit `sun_path`; judged on the resolved
/// base, so `..` in a relative `runtime_dir` never counts against it.
pub(crate) fn check_path_fits(base: &Path) -> io::Result<()> {
    let len = socket_path_len(base);
    if len + 1 > SUN_PATH_MAX {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "socket path under {} would be {len} bytes; sun_path holds {} plus the NUL \
                 (use a shorter runtime_dir)",
                base.display(),
                SUN_PATH_MAX - 1
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::trusted_dir::open_trusted;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    fn made() -> SocketDir {
        let base = open_trusted(Path::new("/tmp")).unwrap();
        make_private_dir(base).unwrap()
    }

    fn bind(dir: &SocketDir) -> std::os::unix::net::UnixDatagram {
        let sock = std::os::unix::net::UnixDatagram::bind(dir.local_path()).unwrap();
        dir.check_socket().unwrap();
        sock
    }

    #[test]
    fn bound_through_the_fd_at_the_path_the_child_is_told() {
        let dir = made();
        let _sock = bind(&dir);
        let meta = std::fs::symlink_metadata(dir.path()).unwrap();
        assert!(std::os::unix::fs::FileTypeExt::is_socket(&meta.file_type()));
        let parent = dir.path().parent().unwrap().to_path_buf();
        assert_eq!(
            std::fs::metadata(&parent).unwrap().permissions().mode() & 0o7777,
            0o700
        );
        dir.remove().unwrap();
        assert!(!parent.exists());
    }

    #[test]
    fn the_socket_only_is_given_away_and_the_directory_stays_ours() {
        let dir = made();
        let _sock = bind(&dir);
        // Root gives it to `nobody`; anyone else can only give it to themselves.
        let me = rustix::process::geteuid().as_raw();
        let (uid, gid) = if me == 0 {
            (65534, 65534)
        } else {
            (me, rustix::process::getegid().as_raw())
        };
        dir.give_socket_to(uid, gid).unwrap();
        let sock = std::fs::symlink_metadata(dir.path()).unwrap();
        assert_eq!(
            (sock.uid(), sock.gid(), sock.mode() & 0o7777),
            (uid, gid, 0o600)
        );
        let parent = std::fs::metadata(dir.path().parent().unwrap()).unwrap();
        assert_eq!((parent.uid(), parent.mode() & 0o7777), (me, 0o711));
    }

    #[test]
    fn a_renamed_directory_is_still_the_one_bound_in_and_removed() {
        // Nobody else can rename it in a trusted base; we can, and the fd still holds it.
        let dir = made();
        let parent = dir.path().parent().unwrap().to_path_buf();
        let aside = parent.with_extension("aside");
        std::fs::rename(&parent, &aside).unwrap();
        let _sock = bind(&dir);
        assert!(aside.join(SOCKET_NAME).exists());
        assert!(!parent.exists());
        // Removal is by the name we made, in the base: the renamed one is not ours to remove
        // by that name any more, so it is left, and saying so is not an error.
        dir.remove().unwrap();
        assert!(
            !aside.join(SOCKET_NAME).exists(),
            "the socket goes by the dir's fd"
        );
        std::fs::remove_dir(&aside).unwrap();
    }
}
