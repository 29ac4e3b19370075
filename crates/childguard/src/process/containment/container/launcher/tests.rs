use super::*;

fn argv(words: &[&str]) -> Vec<OsString> {
    words.iter().map(OsString::from).collect()
}

fn strings(argv: &[OsString]) -> Vec<String> {
    argv.iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect()
}

#[test]
fn a_plain_run_is_read_and_named_after_run() {
    let cmd = argv(&[
        "podman",
        "run",
        "-i",
        "--rm",
        "img",
        "sh",
        "-c",
        "x --name y",
    ]);
    let launch = recognise(&cmd).unwrap();
    assert_eq!(launch.engine, "podman");
    assert!(launch.remove && !launch.detach && launch.name.is_none());
    let named = launch.argv_with_name(&cmd, "cg-1");
    assert_eq!(
        strings(&named),
        [
            "podman",
            "run",
            "--name",
            "cg-1",
            "-i",
            "--rm",
            "img",
            "sh",
            "-c",
            "x --name y"
        ]
    );
}

#[test]
fn global_options_are_kept_for_the_engine_and_container_run_is_read() {
    let cmd = argv(&[
        "/usr/bin/docker",
        "--context=ci",
        "-H",
        "unix:///x.sock",
        "--debug",
        "container",
        "run",
        "-it",
        "img",
    ]);
    let launch = recognise(&cmd).unwrap();
    assert_eq!(
        strings(&launch.globals),
        ["--context=ci", "-H", "unix:///x.sock", "--debug"]
    );
    assert_eq!(
        strings(&launch.argv_with_name(&cmd, "n"))[6..9],
        ["run", "--name", "n"]
    );
}

#[test]
fn the_users_name_rm_and_detach_are_read_past_valued_options() {
    let cmd = argv(&[
        "docker",
        "run",
        "-e",
        "A=1",
        "-v",
        "/a:/b",
        "-eB=2",
        "--name",
        "mine",
        "-itp",
        "80:80",
        "--rm=false",
        "img",
        "--name",
        "not-this",
    ]);
    let launch = recognise(&cmd).unwrap();
    assert_eq!(launch.name.as_deref(), Some("mine"));
    assert!(!launch.remove);
    let detached = recognise(&argv(&["nerdctl", "run", "-d", "img"])).unwrap();
    assert!(detached.detach);
    let detached = recognise(&argv(&["podman", "run", "--detach=true", "img"])).unwrap();
    assert!(detached.detach);
}

#[test]
fn env_in_front_gives_the_engine_its_variables() {
    let cmd = argv(&["env", "-i", "DOCKER_HOST=tcp://h:1", "docker", "run", "img"]);
    let launch = recognise(&cmd).unwrap();
    assert!(launch.env_clear);
    assert_eq!(launch.env, [("DOCKER_HOST".into(), "tcp://h:1".into())]);
    assert_eq!(
        strings(&launch.argv_with_name(&cmd, "n"))[4..7],
        ["run", "--name", "n"]
    );
}

#[test]
fn a_shell_string_of_plain_words_is_rewritten_in_place() {
    let cmd = argv(&["sh", "-c", "exec podman --runtime /x run -i --rm img cat"]);
    let launch = recognise(&cmd).unwrap();
    assert_eq!(strings(&launch.globals), ["--runtime", "/x"]);
    let named = launch.argv_with_name(&cmd, "cg-2");
    assert_eq!(
        strings(&named),
        [
            "sh",
            "-c",
            "exec podman --runtime /x run --name cg-2 -i --rm img cat"
        ]
    );
}

#[test]
fn what_cannot_be_read_surely_is_left_alone() {
    for words in [
        &["podman", "exec", "-i", "c", "sh"][..],
        &["podman", "--unknown-global", "run", "img"],
        &["npx", "server"],
        &["sh", "-c", "podman run -i img | tee log"],
        &["sh", "-c", "podman run -i \"$IMG\""],
        &["env", "--chdir=/", "podman", "run", "img"],
        &["docker"],
        &["docker", "--host"],
    ] {
        assert_eq!(recognise(&argv(words)), None, "{words:?}");
    }
}
