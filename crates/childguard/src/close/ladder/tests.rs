//! Unit tests of [`super`].

use super::*;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn default_is_hup_term_kill() {
    assert_eq!(Ladder::default().to_string(), "HUP:1s,TERM:2s,KILL:5s");
    assert_eq!(
        "HUP:1s,TERM:2s,KILL:5s".parse::<Ladder>().unwrap(),
        Ladder::default()
    );
    assert_eq!(Ladder::default().total_grace(), Duration::from_secs(8));
}

#[test]
fn parses_prefixes_numbers_eof_and_missing_grace() {
    let l: Ladder = "EOF:200ms, SIGHUP:1s500ms ,15:2s,kill".parse().unwrap();
    assert_eq!(l.eof_grace(), Some(ms(200)));
    assert_eq!(
        l.rungs(),
        &[
            Rung::new(Signal::HUP, ms(1500)),
            Rung::new(Signal::TERM, Duration::from_secs(2)),
            Rung::new(Signal::KILL, DEFAULT_GRACE),
        ]
    );
    assert_eq!(l.to_string(), "EOF:200ms,HUP:1500ms,TERM:2s,KILL:1s");
    assert_eq!(l.total_grace(), ms(200 + 1500 + 2000 + 1000));
}

#[test]
fn display_round_trips() {
    for text in [
        "HUP:1s",
        "EOF:1us,TERM:3ns,KILL:0s",
        "USR1:10ms,INT:1min,KILL:5s",
    ] {
        let l: Ladder = text.parse().unwrap();
        let again: Ladder = l.to_string().parse().unwrap();
        assert_eq!(l, again, "{text}");
    }
}

#[test]
fn errors_name_the_bad_part() {
    let cases = [
        ("", "empty"),
        ("HUP:1x", "\"HUP:1x\""),
        ("HUP:1s,,KILL", "item 2 is empty"),
        ("BOGUS:1s", "\"BOGUS:1s\""),
        ("HUP:1s,EOF:1s", "EOF may only be the first"),
        ("EOF", "EOF needs a duration"),
        ("EOF:1s", "at least one signal rung"),
        ("HUP:", "missing duration"),
        ("99:1s", "unknown signal"),
        ("KILL:500000000000y", "longer than the maximum"),
    ];
    for (text, needle) in cases {
        let err = text.parse::<Ladder>().unwrap_err().to_string();
        assert!(
            err.contains(needle),
            "{text:?} gave {err:?}, wanted {needle:?}"
        );
    }
}

/// The only test in this binary that touches `CHILDGUARD_LADDER`, so nothing races it.
#[test]
fn from_env_or_default_reads_validates_and_falls_back() {
    std::env::set_var(LADDER_ENV, "TERM:10ms,KILL:1s");
    assert_eq!(
        Ladder::from_env_or_default().unwrap().to_string(),
        "TERM:10ms,KILL:1s"
    );
    std::env::set_var(LADDER_ENV, "TERM:10ms,KILL:1x");
    let err = Ladder::from_env_or_default().unwrap_err().to_string();
    assert!(
        err.starts_with("CHILDGUARD_LADDER: ") && err.contains("\"KILL:1x\""),
        "{err}"
    );
    std::env::remove_var(LADDER_ENV);
    assert_eq!(Ladder::from_env_or_default().unwrap(), Ladder::default());
}

#[test]
fn presets_are_named_and_parse_from_text() {
    let cases = [
        ("@default", "HUP:1s,TERM:2s,KILL:5s"),
        ("@nbdkit", "HUP:1s,TERM:2s,KILL:5s"),
        ("@qemu-nbd", "HUP:1s,TERM:2s,KILL:5s"),
        ("@postgres", "INT:10s,QUIT:5s,KILL:5s"),
        ("@nginx", "QUIT:10s,TERM:2s,KILL:5s"),
        ("@redis", "TERM:20s,KILL:5s"),
        ("@memcached", "TERM:2s,KILL:1s"),
        (" @Postgres ", "INT:10s,QUIT:5s,KILL:5s"),
    ];
    for (text, rungs) in cases {
        let l: Ladder = text.parse().unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(l.to_string(), rungs, "{text}");
    }
    assert_eq!(Ladder::postgres().to_string(), "INT:10s,QUIT:5s,KILL:5s");
    assert_eq!(Ladder::nginx().to_string(), "QUIT:10s,TERM:2s,KILL:5s");
    assert_eq!(Ladder::redis().to_string(), "TERM:20s,KILL:5s");
    assert_eq!(Ladder::preset("nginx"), Some(Ladder::nginx()));
    assert_eq!(Ladder::preset("pg"), None);
    // Every listed preset parses by its name, and none is empty.
    for (name, make) in LADDER_PRESETS {
        assert_eq!(format!("@{name}").parse::<Ladder>().unwrap(), make());
        assert!(!make().rungs().is_empty(), "{name}");
    }
}

#[test]
fn bad_presets_are_clear_errors() {
    let err = "@pg".parse::<Ladder>().unwrap_err().to_string();
    assert!(err.contains("\"@pg\": unknown preset"), "{err}");
    for (name, _) in LADDER_PRESETS {
        assert!(err.contains(&format!("@{name}")), "{err} lacks @{name}");
    }
    let err = "@".parse::<Ladder>().unwrap_err().to_string();
    assert!(err.contains("unknown preset"), "{err}");
    let err = "@postgres,KILL".parse::<Ladder>().unwrap_err().to_string();
    assert!(err.contains("cannot be combined"), "{err}");
    let err = "EOF:1s,@postgres"
        .parse::<Ladder>()
        .unwrap_err()
        .to_string();
    assert!(err.contains("not one of its rungs"), "{err}");
    let err = "postgres".parse::<Ladder>().unwrap_err().to_string();
    assert!(err.contains("spelled @postgres"), "{err}");
}

#[test]
fn new_rejects_empty() {
    assert!(Ladder::new([]).is_err());
    let l = Ladder::new([Rung::new(Signal::KILL, ms(5))])
        .unwrap()
        .with_eof_grace(ms(1));
    assert_eq!(l.to_string(), "EOF:1ms,KILL:5ms");
}

#[test]
fn noskip_first_turns_skipping_off_and_round_trips() {
    assert!(Ladder::default().skips_ignored());
    assert!("HUP:1s,KILL".parse::<Ladder>().unwrap().skips_ignored());
    let l: Ladder = "noskip, EOF:200ms,HUP:1s,KILL:5s".parse().unwrap();
    assert!(!l.skips_ignored());
    assert_eq!(l.eof_grace(), Some(ms(200)));
    assert_eq!(l.rungs().len(), 2);
    assert_eq!(l.to_string(), "NOSKIP,EOF:200ms,HUP:1s,KILL:5s");
    assert_eq!(l.to_string().parse::<Ladder>().unwrap(), l);
    assert_ne!(l, l.clone().skip_ignored(true));
    let redis: Ladder = "NOSKIP,@redis".parse().unwrap();
    assert_eq!(redis, Ladder::redis().skip_ignored(false));
}

#[test]
fn noskip_elsewhere_or_alone_is_a_clear_error() {
    for (text, part) in [
        ("HUP:1s,NOSKIP,KILL", "NOSKIP"),
        ("NOSKIP:1s,KILL", "NOSKIP:1s"),
        ("NOSKIP", "NOSKIP"),
        ("NOSKIP,NOSKIP:2s,KILL", "NOSKIP:2s"),
    ] {
        let e = text.parse::<Ladder>().unwrap_err();
        assert_eq!(e.part(), part, "{text}");
        assert!(
            e.to_string().contains("NOSKIP may only be the first item"),
            "{e}"
        );
    }
    let e = "NOSKIP,".parse::<Ladder>().unwrap_err();
    assert!(e.to_string().contains("empty"), "{e}");
}
