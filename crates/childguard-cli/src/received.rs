//! [`Received`]: a signal childguard received, who sent it, and whether it already reached CMD
//! by itself ([`Received::reached`]) — so that a terminal's Ctrl-C reaches CMD once.
//!
//! A terminal sends `^C` (`SIGINT`), `^\` (`SIGQUIT`) and, when the session's leader exits, its
//! `SIGHUP` to its whole *foreground process group*: Linux's tty driver calls `kill_pgrp`, and
//! every member gets the signal with `si_code` `SI_KERNEL`. A CMD that shares childguard's
//! process group (`childguard with`'s CMD, `run` without `--group`, `timeout --foreground`) is
//! such a member: it has its copy already, and a forwarded one is a second Ctrl-C, which
//! pytest, terraform and others take as "abort now" and skip their cleanup. A signal sent with
//! kill(2), sigqueue(3) or tgkill(2) (`si_code` ≤ 0) reached childguard alone as far as
//! childguard can tell (a script's `kill -INT <pid>`, a CI runner stopping a job): it is
//! forwarded. A CMD that leads its own group (`run --group`, `timeout`'s default) is not in the
//! foreground group, so the terminal did not reach it: forwarded too. (`childguard timeout`
//! does not ask: it forwards every signal, as GNU timeout(1) does; see `run::signal_trigger`.)
//!
//! Not told apart: a kill(2) aimed at childguard's whole group (`kill -INT -PGID`, a shell
//! sending `SIGHUP` to its jobs when its terminal hangs up) looks like one aimed at childguard
//! alone, so a CMD in that group gets it directly and forwarded. On systems other than Linux,
//! `si_code` is not read: every signal is forwarded, as before.

use childguard::Signal;

/// Who sent a signal, from its `si_code`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sender {
    /// The kernel (`SI_KERNEL`): a terminal's `^C`, `^\` or hangup, among others.
    Kernel,
    /// A process, with kill(2), sigqueue(3), tgkill(2) (`SI_USER`, `SI_QUEUE`, `SI_TKILL`, …).
    /// (Only Linux reads `si_code`: elsewhere every signal is `Unknown`.)
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    Process,
    /// Anything else, or a system where childguard does not read `si_code`: treated as sent to
    /// childguard alone.
    Unknown,
}

/// A signal childguard received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Received {
    /// The signal.
    pub signal: Signal,
    /// Who sent it.
    pub sender: Sender,
}

impl Received {
    /// A signal sent to childguard with kill(2).
    #[cfg(test)]
    pub fn sent(signal: Signal) -> Received {
        Received {
            signal,
            sender: Sender::Process,
        }
    }

    /// From what the signal handler was given; `None` for a number [`Signal`] does not know.
    #[cfg(not(target_os = "linux"))]
    pub fn from_siginfo(info: &libc::siginfo_t) -> Option<Received> {
        Received::from_parts(info.si_signo, info.si_code)
    }

    /// From a signal's number and `si_code` (a `signalfd` record's, or a handler's siginfo);
    /// `None` for a number [`Signal`] does not know.
    pub fn from_parts(signo: libc::c_int, code: libc::c_int) -> Option<Received> {
        Some(Received {
            signal: Signal::from_raw(signo)?,
            sender: sender(code),
        })
    }

    /// Whether this signal already reached CMD (pid `cmd`) by itself: the kernel sent it to
    /// our whole process group — a terminal's `^C` or `^\`, or its `SIGHUP` — and CMD is in
    /// that group now. Then forwarding it would deliver it twice. Any doubt (CMD's group
    /// cannot be read: it is gone) means "no": forwarded, as before.
    pub fn reached(&self, cmd: Option<u32>) -> bool {
        if self.sender != Sender::Kernel {
            return false;
        }
        let Some(cmd) = cmd else { return false };
        reached_through_group(
            self.signal,
            self.sender,
            shares_our_group(cmd),
            leads_our_session(),
        )
    }
}

/// The decision, from the facts: a kernel-sent INT or QUIT went to the terminal's foreground
/// group (the tty driver's `kill_pgrp`), which is ours since we got it; so did a kernel-sent
/// HUP, unless we lead our session — a hangup sends `SIGHUP` to the session's leader alone
/// (the group gets one only when the leader exits, and that leader would be us).
fn reached_through_group(
    signal: Signal,
    sender: Sender,
    cmd_in_our_group: bool,
    we_lead_session: bool,
) -> bool {
    let to_group = match signal {
        Signal::INT | Signal::QUIT => true,
        Signal::HUP => !we_lead_session,
        _ => false,
    };
    sender == Sender::Kernel && cmd_in_our_group && to_group
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn sender(code: libc::c_int) -> Sender {
    match code {
        libc::SI_KERNEL => Sender::Kernel,
        // SI_USER is 0; SI_QUEUE, SI_TKILL, SI_MESGQ, SI_ASYNCIO, SI_TIMER are negative.
        code if code <= 0 => Sender::Process,
        _ => Sender::Unknown,
    }
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn sender(_code: libc::c_int) -> Sender {
    Sender::Unknown
}

/// Whether process `pid` is in our process group now (getpgid(2)); `false` if that cannot be
/// read. CMD is our unreaped child, so its pid cannot have been reused by another process.
fn shares_our_group(pid: u32) -> bool {
    let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    else {
        return false;
    };
    rustix::process::getpgid(Some(pid)).is_ok_and(|group| group == rustix::process::getpgrp())
}

/// Whether we lead our session (getsid(2)): then a terminal's hangup sends `SIGHUP` to us
/// alone.
fn leads_our_session() -> bool {
    rustix::process::getsid(None).is_ok_and(|sid| sid == rustix::process::getpid())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_terminals_signals_reached_a_cmd_in_our_group() {
        for signal in [Signal::INT, Signal::QUIT, Signal::HUP] {
            assert!(reached_through_group(signal, Sender::Kernel, true, false));
        }
        // A hangup's SIGHUP goes to the session's leader alone.
        assert!(!reached_through_group(
            Signal::HUP,
            Sender::Kernel,
            true,
            true
        ));
        assert!(reached_through_group(
            Signal::INT,
            Sender::Kernel,
            true,
            true
        ));
    }

    #[test]
    fn everything_else_is_forwarded() {
        // CMD in a group of its own: the terminal did not reach it.
        assert!(!reached_through_group(
            Signal::INT,
            Sender::Kernel,
            false,
            false
        ));
        // kill(2): to childguard, as far as it can tell.
        for sender in [Sender::Process, Sender::Unknown] {
            assert!(!reached_through_group(Signal::INT, sender, true, false));
        }
        // Signals a terminal does not send its group.
        for signal in [Signal::TERM, Signal::USR1, Signal::KILL] {
            assert!(!reached_through_group(signal, Sender::Kernel, true, false));
        }
        assert!(!Received::sent(Signal::INT).reached(Some(std::process::id())));
    }

    #[cfg(any(target_os = "linux", target_os = "android"))]
    #[test]
    fn si_codes() {
        assert_eq!(sender(libc::SI_KERNEL), Sender::Kernel);
        assert_eq!(sender(libc::SI_USER), Sender::Process);
        assert_eq!(sender(libc::SI_QUEUE), Sender::Process);
        assert_eq!(sender(libc::SI_TKILL), Sender::Process);
        assert_eq!(sender(1), Sender::Unknown);
    }

    #[test]
    fn our_own_group_and_a_missing_process() {
        assert!(shares_our_group(std::process::id()));
        assert!(!shares_our_group(0));
        assert!(!shares_our_group(u32::MAX));
    }
}
