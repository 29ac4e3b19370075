//! [`SocketDir`]: a private directory (mode 0700, a random name) holding one socket file, both
//! removed on drop. Socket activation's listening socket and `Ready::Notify`'s `NOTIFY_SOCKET`
//! are made in one. Moved out of `spawn/activation.rs` by the layering (issue 21 item 5): the
//! notify socket is also heard during a close, below `spawn/`.

use std::hash::{BuildHasher, Hasher};
use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// `sizeof(sockaddr_un.sun_path)` on Linux, the NUL included.
const SUN_PATH_MAX: usize = 108;

/// The socket file's name inside the private directory.
const SOCKET_NAME: &str = "sock";

/// Prefix of the private directory's name.
pub(crate) const DIR_PREFIX: &str = "childguard-";

/// Hex digits of randomness in the directory name.
const SUFFIX_LEN: usize = 12;

/// The private directory and the socket file in it. Both are removed on drop.
#[derive(Debug)]
pub(crate) struct SocketDir {
    dir: PathBuf,
    path: PathBuf,
    removed: bool,
}

impl SocketDir {
    /// The socket's path.
    pub(crate) fn path(&self) -> &Path {
        &self.path
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
        let file = ignore_missing(std::fs::remove_file(&self.path));
        let dir = ignore_missing(std::fs::remove_dir(&self.dir));
        file.and(dir)
    }
}

impl Drop for SocketDir {
    fn drop(&mut self) {
        let _ = self.remove_both();
    }
}

fn ignore_missing(r: io::Result<()>) -> io::Result<()> {
    match r {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// Random hex digits for a directory name (std's per-process random SipHash keys, mixed with
/// the time and a counter; `create_dir` fails on any existing entry, so a guess costs an
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

/// mkdtemp: a new directory `base/childguard-XXXXXXXXXXXX` with mode 0700.
pub(crate) fn make_private_dir(base: &Path) -> io::Result<SocketDir> {
    let mut builder = std::fs::DirBuilder::new();
    builder.mode(0o700);
    for _ in 0..100 {
        let dir = base.join(format!("{DIR_PREFIX}{}", random_suffix()));
        match builder.create(&dir) {
            Ok(()) => {
                let made = SocketDir {
                    path: dir.join(SOCKET_NAME),
                    dir,
                    removed: false,
                };
                // The umask may have taken bits away; 0700 exactly is what we want.
                std::fs::set_permissions(&made.dir, std::fs::Permissions::from_mode(0o700))?;
                return Ok(made);
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => {
                return Err(io::Error::new(
                    e.kind(),
                    format!("creating a private directory in {}: {e}", base.display()),
                ))
            }
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        format!(
            "no free directory name in {} after 100 tries",
            base.display()
        ),
    ))
}

/// The directory in which a private socket directory is made: `runtime_dir` made absolute
/// (against the current directory, now: a `NOTIFY_SOCKET` must start with `/` for
/// libsystemd's `sd_notify`, and the child may change directory before it uses a path), else
/// [`default_base`]. An error names the directory if the current one cannot be read.
pub(crate) fn base_dir(runtime_dir: Option<&Path>) -> io::Result<PathBuf> {
    let Some(dir) = runtime_dir else {
        return Ok(default_base());
    };
    if dir.as_os_str().is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "runtime_dir is empty: name a directory",
        ));
    }
    std::path::absolute(dir).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!(
                "runtime_dir {} is relative, and the current directory cannot be read to \
                 make it absolute: {e}",
                dir.display()
            ),
        )
    })
}

pub(crate) fn default_base() -> PathBuf {
    std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute() && p.is_dir())
        .unwrap_or_else(|| PathBuf::from("/tmp"))
}

/// The path the socket will have under `base`, with the random part as placeholders.
fn socket_path_len(base: &Path) -> usize {
    base.join(format!("{DIR_PREFIX}{}", "x".repeat(SUFFIX_LEN)))
        .join(SOCKET_NAME)
        .as_os_str()
        .len()
}

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
