//! [`Ladder`] and [`Rung`]: which signals the close path sends, in which order, and how long it
//! waits after each.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::base::signal::{Signal, SignalParseError};

/// The environment variable read by [`Ladder::from_env_or_default`].
pub const LADDER_ENV: &str = "CHILDGUARD_LADDER";

/// The longest grace a ladder's text may give (365 days): longer ones are a typo, not a plan.
pub const MAX_GRACE: Duration = Duration::from_secs(365 * 24 * 3600);

/// The grace a rung gets when its text names no duration (`"KILL"` alone).
pub const DEFAULT_GRACE: Duration = Duration::from_secs(1);

/// One step of a [`Ladder`]: send `signal`, then wait up to `grace` for the child to exit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Rung {
    /// The signal sent when this rung starts.
    pub signal: Signal,
    /// How long to wait after sending it before the next rung.
    #[cfg_attr(feature = "serde", serde(with = "crate::close::report::millis"))]
    pub grace: Duration,
}

impl Rung {
    /// A rung sending `signal` and then waiting up to `grace`.
    pub fn new(signal: Signal, grace: Duration) -> Rung {
        Rung { signal, grace }
    }
}

/// The escalation the close path climbs after it has shut the socket down.
///
/// A ladder is an optional *EOF wait* followed by one or more [`Rung`]s. The text form is a
/// comma-separated list, e.g. `"EOF:200ms,HUP:1s,TERM:2s,KILL:5s"`:
///
/// - `SIGNAL:GRACE` — a signal name with or without `SIG` (`HUP`, `SIGTERM`), or a number
///   (`15`), and a [humantime](https://docs.rs/humantime) duration (`250ms`, `2s`, `1min`).
///   The grace may be left out (`KILL`) and is then [`DEFAULT_GRACE`].
/// - `EOF:GRACE` — only as the first item: after the socket is shut down, wait this long for
///   the server to notice EOF and exit on its own before the first signal.
/// - `NOSKIP` — only as the very first item (before `EOF:`, or before a preset:
///   `NOSKIP,@redis`): send every rung, also one whose signal the server ignores (see
///   [`Ladder::skip_ignored`]; by default such a rung is skipped at once).
///
/// [`Ladder::default()`] is `HUP:1s,TERM:2s,KILL:5s`: `SIGHUP` first because servers spawned
/// over a socket (nbdkit, qemu-nbd) treat it as "the client went away", `SIGTERM` as the usual
/// request to exit, `SIGKILL` when nothing else worked.
///
/// # Presets
///
/// Servers whose `SIGHUP` means "reload" (postgres, nginx) or nothing (redis) only lose the
/// HUP rung's grace on the default ladder, and some want another first signal. Each has a
/// named preset, as a constructor ([`Ladder::postgres`], [`Ladder::nginx`], …) and in the text
/// form as `@NAME` (`"@postgres"`, `--ladder @postgres`, `CHILDGUARD_LADDER=@redis`). The `@`
/// cannot begin a signal or a duration, so a preset never reads as a rung; it is the whole
/// text (presets are not combined with rungs). An unknown name is an error listing the known
/// ones ([`LADDER_PRESETS`]). What each signal does to each server, and the figures behind the
/// graces, are in `docs/servers.md`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Ladder {
    eof_grace: Option<Duration>,
    rungs: Vec<Rung>,
    /// Skip a catchable rung whose signal the server ignores ([`Ladder::skip_ignored`]).
    skip_ignored: bool,
}

impl Default for Ladder {
    fn default() -> Ladder {
        Ladder {
            eof_grace: None,
            skip_ignored: true,
            rungs: vec![
                Rung::new(Signal::HUP, Duration::from_secs(1)),
                Rung::new(Signal::TERM, Duration::from_secs(2)),
                Rung::new(Signal::KILL, Duration::from_secs(5)),
            ],
        }
    }
}

impl Ladder {
    /// The preset called `name` (without the `@`; see [`LADDER_PRESETS`]), if there is one.
    pub fn preset(name: &str) -> Option<Ladder> {
        LADDER_PRESETS
            .iter()
            .find(|(known, _)| known.eq_ignore_ascii_case(name))
            .map(|(_, make)| make())
    }

    /// A ladder of these rungs, with no EOF wait. Fails if `rungs` is empty.
    pub fn new(rungs: impl IntoIterator<Item = Rung>) -> Result<Ladder, LadderParseError> {
        let rungs: Vec<Rung> = rungs.into_iter().collect();
        if rungs.is_empty() {
            return Err(LadderParseError::new(
                "",
                "a ladder needs at least one signal rung",
            ));
        }
        Ok(Ladder {
            eof_grace: None,
            rungs,
            skip_ignored: true,
        })
    }

    /// The same ladder, first waiting `grace` after shutdown for a voluntary exit.
    pub fn with_eof_grace(mut self, grace: Duration) -> Ladder {
        self.eof_grace = Some(grace);
        self
    }

    /// The same ladder without its EOF wait: the first rung is due at once (a climb that did
    /// not begin with a shutdown — a watchdog miss, an engine's stop).
    pub fn without_eof_grace(mut self) -> Ladder {
        self.eof_grace = None;
        self
    }

    /// The same ladder (its EOF wait, its [`skip_ignored`](Ladder::skip_ignored) setting) with
    /// other rungs: a ladder scaled into a budget, or begun with another signal. Fails if
    /// `rungs` is empty.
    pub fn with_rungs(
        &self,
        rungs: impl IntoIterator<Item = Rung>,
    ) -> Result<Ladder, LadderParseError> {
        let mut ladder = Ladder::new(rungs)?;
        ladder.eof_grace = self.eof_grace;
        ladder.skip_ignored = self.skip_ignored;
        Ok(ladder)
    }

    /// The same ladder, skipping (`true`, the default) or sending (`false`) a rung whose signal
    /// the server ignores.
    ///
    /// Right before each catchable rung but the last, the close reads what the server (the
    /// process spawned, while it runs) does with the rung's signal (Linux: `SigIgn`/`SigCgt` in
    /// `/proc/PID/status`). A signal it ignores (`SIG_IGN`: redis 7 ignores `SIGHUP`)
    /// would only cost the rung's grace, so the rung is skipped at once — nothing is sent, its
    /// grace is not spent, the next rung goes out — and
    /// [`CloseReport::skipped`](crate::CloseReport::skipped) says so. `KILL` and `STOP` are
    /// never skipped (no process can ignore them), nor is the last rung (its grace is the
    /// bound the close promised to wait). Off Linux nothing is read and every rung is sent.
    ///
    /// Off (`false`): every rung is sent as written, as a ladder did before. In the text form
    /// the item `NOSKIP`, first (before any `EOF:`), turns it off: `"NOSKIP,HUP:1s,KILL"`.
    /// [`Builder::skip_ignored_rungs`](crate::Builder::skip_ignored_rungs) turns it off for
    /// every close of a handle, whatever its ladder says: a rung is skipped only when both
    /// allow it.
    pub fn skip_ignored(mut self, on: bool) -> Ladder {
        self.skip_ignored = on;
        self
    }

    /// Whether rungs the server ignores are skipped (see [`Ladder::skip_ignored`]).
    pub fn skips_ignored(&self) -> bool {
        self.skip_ignored
    }

    /// The ladder in `CHILDGUARD_LADDER` if it is set, else [`Ladder::default()`].
    ///
    /// A set but invalid value is an error naming the variable and the bad part, not silently
    /// replaced by the default.
    pub fn from_env_or_default() -> Result<Ladder, LadderParseError> {
        match std::env::var(LADDER_ENV) {
            Ok(text) => text.parse().map_err(|e: LadderParseError| e.in_env()),
            Err(std::env::VarError::NotPresent) => Ok(Ladder::default()),
            Err(std::env::VarError::NotUnicode(_)) => Err(LadderParseError {
                part: String::new(),
                why: "is not valid UTF-8".into(),
                env: true,
            }),
        }
    }

    /// How long the close path waits for a voluntary exit after shutdown, if at all.
    pub fn eof_grace(&self) -> Option<Duration> {
        self.eof_grace
    }

    /// The signal rungs, in order.
    pub fn rungs(&self) -> &[Rung] {
        &self.rungs
    }

    /// The longest the ladder can take: the EOF wait plus every rung's grace.
    pub fn total_grace(&self) -> Duration {
        self.rungs
            .iter()
            .fold(self.eof_grace.unwrap_or_default(), |sum, r| {
                sum.saturating_add(r.grace)
            })
    }
}

/// Why a string is not a [`Ladder`]: names the offending part and the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LadderParseError {
    part: String,
    why: String,
    env: bool,
}

impl LadderParseError {
    fn new(part: &str, why: impl Into<String>) -> LadderParseError {
        LadderParseError {
            part: part.to_string(),
            why: why.into(),
            env: false,
        }
    }

    fn in_env(mut self) -> LadderParseError {
        self.env = true;
        self
    }

    /// The rung text that was rejected (empty when the ladder as a whole is wrong).
    pub fn part(&self) -> &str {
        &self.part
    }
}

impl fmt::Display for LadderParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.env {
            write!(f, "{LADDER_ENV}: ")?;
        }
        if self.part.is_empty() {
            write!(f, "invalid ladder: {}", self.why)
        } else {
            write!(f, "invalid ladder rung {:?}: {}", self.part, self.why)
        }
    }
}

impl std::error::Error for LadderParseError {}

impl FromStr for Ladder {
    type Err = LadderParseError;

    fn from_str(text: &str) -> Result<Ladder, LadderParseError> {
        if text.trim().is_empty() {
            return Err(LadderParseError::new(
                "",
                "empty (expected e.g. \"HUP:1s,TERM:2s,KILL:5s\")",
            ));
        }
        if let Some(name) = text.trim().strip_prefix('@') {
            return parse_preset(text.trim(), name);
        }
        // `NOSKIP,` before the rest, which may be a preset: `NOSKIP,@redis`.
        if let Some((first, rest)) = text.split_once(',') {
            if first.trim().eq_ignore_ascii_case(NOSKIP) {
                return Ok(rest.parse::<Ladder>()?.skip_ignored(false));
            }
        }
        let mut eof_grace = None;
        let mut rungs = Vec::new();
        for (index, part) in text.split(',').map(str::trim).enumerate() {
            if part.is_empty() {
                return Err(LadderParseError::new(
                    part,
                    format!("item {} is empty (stray comma?)", index + 1),
                ));
            }
            let (name, grace) = match part.split_once(':') {
                Some((name, grace)) => (name.trim(), Some(parse_grace(part, grace.trim())?)),
                None => (part, None),
            };
            if name.eq_ignore_ascii_case(NOSKIP) {
                return Err(LadderParseError::new(
                    part,
                    "NOSKIP may only be the first item, followed by the rungs, and takes no \
                     duration",
                ));
            }
            if name.eq_ignore_ascii_case("EOF") {
                if index != 0 {
                    return Err(LadderParseError::new(
                        part,
                        "EOF may only be the first item",
                    ));
                }
                let grace = grace.ok_or_else(|| {
                    LadderParseError::new(part, "EOF needs a duration, e.g. EOF:200ms")
                })?;
                eof_grace = Some(grace);
                continue;
            }
            if part.starts_with('@') {
                return Err(LadderParseError::new(
                    part,
                    "a preset is the whole ladder, not one of its rungs",
                ));
            }
            let signal = name.parse::<Signal>().map_err(|e: SignalParseError| {
                // `postgres` alone reads as a signal name: say what was probably meant.
                let hint = match Ladder::preset(name) {
                    Some(_) => format!(" (the preset is spelled @{})", name.to_lowercase()),
                    None => String::new(),
                };
                LadderParseError::new(part, format!("{e}{hint}"))
            })?;
            rungs.push(Rung::new(signal, grace.unwrap_or(DEFAULT_GRACE)));
        }
        if rungs.is_empty() {
            return Err(LadderParseError::new(
                text.trim(),
                "a ladder needs at least one signal rung",
            ));
        }
        Ok(Ladder {
            eof_grace,
            rungs,
            skip_ignored: true,
        })
    }
}

/// The text item that turns [`Ladder::skip_ignored`] off.
const NOSKIP: &str = "NOSKIP";

/// `@NAME`: the whole text is a preset.
fn parse_preset(text: &str, name: &str) -> Result<Ladder, LadderParseError> {
    if text.contains(',') {
        return Err(LadderParseError::new(
            text,
            "a preset is the whole ladder: it cannot be combined with rungs",
        ));
    }
    Ladder::preset(name.trim()).ok_or_else(|| {
        let known: Vec<String> = LADDER_PRESETS
            .iter()
            .map(|(n, _)| format!("@{n}"))
            .collect();
        LadderParseError::new(
            text,
            format!("unknown preset; the presets are {}", known.join(", ")),
        )
    })
}

fn parse_grace(part: &str, grace: &str) -> Result<Duration, LadderParseError> {
    if grace.is_empty() {
        return Err(LadderParseError::new(part, "missing duration after ':'"));
    }
    let parsed = humantime::parse_duration(grace)
        .map_err(|e| LadderParseError::new(part, format!("bad duration {grace:?}: {e}")))?;
    if parsed > MAX_GRACE {
        return Err(LadderParseError::new(
            part,
            format!("duration {grace:?} is longer than the maximum of 365 days"),
        ));
    }
    Ok(parsed)
}

/// Writes a duration in one unit so that it parses back exactly (`1500ms`, `2s`, `10us`).
pub(crate) fn write_duration(f: &mut fmt::Formatter<'_>, d: Duration) -> fmt::Result {
    let nanos = d.as_nanos();
    let (unit, per) = if nanos % 1_000_000_000 == 0 {
        ("s", 1_000_000_000)
    } else if nanos % 1_000_000 == 0 {
        ("ms", 1_000_000)
    } else if nanos % 1_000 == 0 {
        ("us", 1_000)
    } else {
        ("ns", 1)
    };
    write!(f, "{}{unit}", nanos / per)
}

impl fmt::Display for Rung {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:", self.signal)?;
        write_duration(f, self.grace)
    }
}

impl fmt::Display for Ladder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.skip_ignored {
            write!(f, "{NOSKIP},")?;
        }
        if let Some(grace) = self.eof_grace {
            f.write_str("EOF:")?;
            write_duration(f, grace)?;
            f.write_str(",")?;
        }
        for (i, rung) in self.rungs.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{rung}")?;
        }
        Ok(())
    }
}

mod presets;
#[cfg(test)]
mod tests;

pub use presets::{PresetFn, LADDER_PRESETS};
