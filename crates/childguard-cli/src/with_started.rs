//! A server `with` started: a plain handle, or — with `--restart` — the library's
//! `Supervisor`, whose crashes restart the server instead of ending the run. Either way the run
//! ends (125) when the server is gone for good: a plain server's exit, a supervised one's end
//! (the policy said no restart, or the crash-loop limit made it give up).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use childguard::{Builder, ChildHandle, Restart, Supervisor};

/// One started server.
pub(crate) enum Started {
    Plain(Box<ChildHandle>),
    /// The supervisor, and whether its supervision has ended.
    Supervised(Supervisor, Arc<AtomicBool>),
}

impl Started {
    /// Supervises the server `make` builds.
    pub(crate) fn supervised(
        make: impl FnMut() -> Builder + Send + 'static,
        restart: Restart,
    ) -> childguard::Result<Started> {
        let sup = Supervisor::start(make, restart)?;
        let ended = crate::restarting::wake_on_end(&sup);
        Ok(Started::Supervised(sup, ended))
    }

    /// `Some(what to say)` once the server is gone for good; `None` while it runs (or, when
    /// supervised, is being restarted).
    pub(crate) fn gone(&mut self) -> Option<Vec<String>> {
        match self {
            Started::Plain(server) => {
                let status = server.try_wait().ok().flatten()?;
                let program = server.program().unwrap_or("server").to_string();
                let mut said = Vec::new();
                if let Some(miss) = server.watchdog_missed() {
                    said.push(format!("server {program}: {miss}; closed with its ladder"));
                }
                said.push(format!(
                    "server {program} exited while CMD ran ({status}); stopping CMD"
                ));
                if let Some(limits) = server.limits_report().filter(|l| l.result.is_some()) {
                    said.push(format!("server {program}: {limits}"));
                }
                if let Some(tail) = server.output_tail().filter(|t| !t.is_empty()) {
                    said.push(format!("its output ended with:\n{tail}"));
                }
                Some(said)
            }
            Started::Supervised(sup, ended) => {
                if !ended.load(Ordering::SeqCst) && !sup.ended() {
                    return None;
                }
                let last = sup.exits().last().map(ToString::to_string);
                let why = match sup.wait_for_start(u64::MAX, std::time::Duration::ZERO) {
                    Err(e) if e.kind() == childguard::ErrorKind::CrashLoop => e.to_string(),
                    _ => format!(
                        "a server exited and its policy does not restart it ({})",
                        last.unwrap_or_default()
                    ),
                };
                Some(vec![format!("{why}; stopping CMD")])
            }
        }
    }

    /// Closes it with its ladder (a supervised one: no more restarts, every start closed).
    pub(crate) fn close(self) -> Result<(), childguard::Error> {
        match self {
            Started::Plain(server) => server.close().map(drop),
            Started::Supervised(sup, _) => sup.close().map(drop),
        }
    }
}
