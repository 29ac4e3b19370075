//! The guardian: kills a contained child's whole cgroup when this process dies first, even by
//! `SIGKILL` ([`Builder::exit_with_parent`](crate::Builder::exit_with_parent) with
//! [`Containment`](crate::Containment)).
//!
//! `PR_SET_PDEATHSIG` reaches the direct child only; its `setsid`'d workers and daemons would
//! live on. So each such child gets a guardian: a `/bin/sh` started *before* the child, outside
//! its cgroup and in a process group of its own, whose stdin is the read end of a pipe whose
//! only write end is ours (close-on-exec). It blocks in `read`. When this process dies — by any
//! means — the kernel closes that write end, `read` sees EOF, and the guardian writes `1` to
//! the cgroup's `cgroup.kill`, then removes the emptied directory (bottom-up, with the cgroups
//! the server made inside it). When the close ends normally
//! we write `q` first: the guardian exits without killing, and we reap it.
//!
//! Race closed: the guardian exists before the child does, so there is no moment in which
//! the child runs unguarded; anything the child forks while we die is born inside the cgroup
//! and dies with it (`cgroup.kill` is atomic against forks). Races left, documented: the
//! tree lives on for the moment between our death and the guardian's write (the kernel closing
//! our fds, then `sh` being scheduled: milliseconds); a `fork()` without `exec` elsewhere in
//! this program holds a copy of the write end until it execs or exits, delaying the EOF; and a
//! guardian killed before us (it is not in our process group, so a `killpg` of ours does not
//! reach it, but a `SIGKILL` by pid or the OOM killer would) protects nothing — the leader
//! still gets its `PDEATHSIG`.

use std::io::{self, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// What the guardian runs. `$1` is the cgroup directory. `trim DIR DEPTH` removes the cgroups
/// the server made inside DIR deepest first, then DIR (as [`super::trim`] does: at most 32
/// levels, symlinks not followed); it is retried until the killed tree has exited.
const SCRIPT: &str = r#"read -r word
[ "$word" = q ] && exit 0
echo 1 > "$1/cgroup.kill"
trim() {
  if [ "$2" -lt 32 ]; then
    for d in "$1"/*/ "$1"/.[!.]*/; do
      d=${d%/}
      [ -d "$d" ] && [ ! -L "$d" ] && trim "$d" $(($2 + 1))
    done
  fi
  rmdir "$1" 2>/dev/null
}
i=0
while [ "$i" -lt 50 ]; do trim "$1" 0 && exit 0; sleep 0.1; i=$((i+1)); done
"#;

/// A running guardian for one cgroup.
#[derive(Debug)]
pub(crate) struct Guardian {
    child: Child,
    /// Our (only) write end of its stdin pipe.
    pipe: Option<std::fs::File>,
}

impl Guardian {
    /// Starts the guardian of the cgroup at `dir`.
    pub(crate) fn start(dir: &Path) -> io::Result<Guardian> {
        let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
        let child = Command::new("/bin/sh")
            .arg("-c")
            .arg(SCRIPT)
            .arg("childguard-guardian")
            .arg(dir)
            .stdin(Stdio::from(read))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .map_err(|e| io::Error::new(e.kind(), format!("starting the guardian /bin/sh: {e}")))?;
        Ok(Guardian {
            child,
            pipe: Some(std::fs::File::from(write)),
        })
    }

    /// The guardian's pid.
    #[allow(dead_code)]
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Tells the guardian the close is over (no kill), and reaps it.
    pub(crate) fn dismiss(&mut self) {
        if let Some(mut pipe) = self.pipe.take() {
            let _ = pipe.write_all(b"q\n");
            drop(pipe);
            // It exits as soon as it has read the line.
            let _ = self.child.wait();
        }
    }
}

impl Drop for Guardian {
    fn drop(&mut self) {
        self.dismiss();
    }
}
