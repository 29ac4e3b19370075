//! What a user of the published crates gets (issue 22 item 7): docs.rs documents the faces a
//! user enables, and every crate a user installs declares versions for its path dependencies
//! (`cargo package` itself runs in `.ci/run`).

use std::path::{Path, PathBuf};

fn manifest(krate: &str) -> (PathBuf, String) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../crates")
        .join(krate)
        .join("Cargo.toml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    (path, text)
}

/// The lines of `[section]`, up to the next header.
fn section<'a>(text: &'a str, name: &str) -> Option<Vec<&'a str>> {
    let header = format!("[{name}]");
    let mut lines = text.lines().skip_while(|l| l.trim() != header);
    lines.next()?;
    Some(
        lines
            .take_while(|l| !l.trim_start().starts_with('['))
            .collect(),
    )
}

/// The quoted words of `key = [ ... ]` on one line of `lines`.
fn list(lines: &[&str], key: &str) -> Option<Vec<String>> {
    let line = lines
        .iter()
        .find(|l| l.trim_start().starts_with(&format!("{key} =")))?;
    let inside = line.split_once('[')?.1.split_once(']')?.0;
    Some(
        inside
            .split(',')
            .map(|w| w.trim().trim_matches('"').to_owned())
            .filter(|w| !w.is_empty())
            .collect(),
    )
}

#[test]
fn docs_rs_builds_the_tokio_serde_and_tracing_faces_but_not_failpoints() {
    let (path, text) = manifest("childguard");
    let docs = section(&text, "package.metadata.docs.rs")
        .unwrap_or_else(|| panic!("{}: no [package.metadata.docs.rs]", path.display()));
    let features = list(&docs, "features").expect("docs.rs features list");
    for wanted in ["tokio", "serde", "tracing"] {
        assert!(
            features.iter().any(|f| f == wanted),
            "docs.rs lacks {wanted}: {features:?}"
        );
    }
    assert!(
        !features.iter().any(|f| f == "failpoints"),
        "failpoints is for our tests: {features:?}"
    );
    let declared = section(&text, "features").expect("[features]");
    for f in &features {
        assert!(
            declared
                .iter()
                .any(|l| l.trim_start().starts_with(&format!("{f} ="))),
            "docs.rs asks for feature {f}, which {} does not declare",
            path.display()
        );
    }
}

#[test]
fn installable_crates_give_versions_for_their_path_dependencies() {
    for krate in [
        "childguard",
        "childguard-cli",
        "childguard-ffi",
        "slowserver",
        "childguard-teardown",
        "childguard-forksafe",
    ] {
        let (path, text) = manifest(krate);
        assert!(
            !text.lines().any(|l| l.trim() == "publish = false"),
            "{}: publish = false",
            path.display()
        );
        let deps = section(&text, "dependencies").unwrap_or_default();
        for dep in deps.iter().filter(|l| l.contains("path =")) {
            assert!(
                dep.contains("version ="),
                "{}: a path dependency without a version: {dep}",
                path.display()
            );
        }
    }
    let (path, root) = {
        let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml");
        let t = std::fs::read_to_string(&p).unwrap();
        (p, t)
    };
    let ws = section(&root, "workspace.dependencies").expect("[workspace.dependencies]");
    for dep in ws.iter().filter(|l| l.contains("path =")) {
        assert!(dep.contains("version ="), "{}: {dep}", path.display());
    }
}
