//! The library reads as layers (issue 21 item 5): the modules of `crates/childguard/src` import
//! one another only downward, with no circle, and no library file grows past [`MAX_LINES`].
//!
//! A small checker of our own, no dependencies: it reads every `.rs` file under the library's
//! `src/`, drops comments, doc comments and string literals, and collects each module's paths
//! into other modules of the crate — `use crate::…` (with `{a, b::c}` groups, `self`, `as`),
//! `super::…` and `self::…` resolved against the module (inline `mod x { … }` included),
//! `crate::x::…` paths written in code, and paths through a child module's name. A path through
//! a name another module imports (`pub use`, `pub(crate) use`, or a private `use` seen by a
//! child through `super::`) is followed to the module that defines it, so an edge names the
//! module really used, not the one that re-exports it.
//!
//! The edges are then looked at folder by folder: at the crate root, between the top-level
//! folders/modules; inside each folder, between its files and sub-folders. A folder's own
//! `mod.rs` (the crate root's `lib.rs`) is its face and is not a node of its folder's graph: it
//! may re-export its children, and they may use what it defines. Any circle fails the test,
//! each edge of it named with one `file:line`. At the root each top-level folder/module must be
//! in [`LAYERS`] and may import only from its own rank or below.
//!
//! Unit-test modules (`#[cfg(test)] mod …`, inline or in their own file) are not part of the
//! library's build and may use any module: their paths are not edges.
//!
//! An inline `mod x { … }` that stands in for a file module `x` under another `#[cfg]` does not
//! hide the file: the file keeps the path, and the stand-in's paths count as the file's.
//!
//! What it cannot see: macro-expanded paths other than literal `$crate::…` in `macro_rules!`
//! bodies, and glob imports (`use x::*`) beyond the edge to `x` itself.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt::Write as _;
use std::path::Path;

/// No library file over this many lines, unless [`LONG_FILES`] says why.
const MAX_LINES: usize = 500;

/// Files (relative to `crates/childguard/src`) allowed over [`MAX_LINES`], each with the reason.
const LONG_FILES: &[(&str, &str)] = &[];

/// The layers, bottom (0) to top: each top-level folder or module of `src/` and its rank. A
/// module may import from its own rank or below, never above.
const LAYERS: &[(&str, usize)] = &[
    // Signal numbers, failpoints, tracing events: below `sys`, whose wrappers take a `Signal`.
    ("base", 0),
    ("sys", 1),
    // The one event loop (with its file watches), the one wait primitive, the SIGCHLD
    // notifier and the per-process globals: below the process, which waits through them and
    // whose cgroup watches are the loop's.
    ("core", 2),
    // One child and what it owns: pidfd, the portable mechanism, group, descendants, its cgroup.
    ("process", 3),
    ("close", 4),
    // The crate's error carries a `CloseReport`: it sits beside `close/`.
    ("error", 4),
    ("spawn", 5),
    ("handle", 6),
    // Restarts: a server started again from its builder, above the one handle it drives.
    ("supervise", 7),
    ("tokio", 8),
];

// ---------------------------------------------------------------------------------------------
// Tokens: comments, doc comments and string/char literals gone; identifiers, `::`, punctuation.

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Ident(String),
    PathSep,
    Punct(char),
    Literal,
}

#[derive(Clone, Debug)]
struct Token {
    tok: Tok,
    line: usize,
}

fn tokenize(text: &str) -> Vec<Token> {
    let c: Vec<char> = text.chars().collect();
    let at = |i: usize| c.get(i).copied().unwrap_or('\0');
    let n = c.len();
    let mut out = Vec::new();
    let (mut i, mut line) = (0, 1);
    while i < n {
        let ch = c[i];
        if ch == '\n' {
            line += 1;
            i += 1;
        } else if ch.is_whitespace() {
            i += 1;
        } else if ch == '/' && at(i + 1) == '/' {
            while i < n && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && at(i + 1) == '*' {
            let mut depth = 1;
            i += 2;
            while i < n && depth > 0 {
                if c[i] == '\n' {
                    line += 1;
                }
                if c[i] == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                } else {
                    i += 1;
                }
            }
        } else if let Some(hashes_from) = raw_string_start(&c, i) {
            // r"…", r#"…"#, br#"…"#: ends at a quote followed by as many hashes.
            let mut j = hashes_from;
            let mut hashes = 0;
            while at(j) == '#' {
                hashes += 1;
                j += 1;
            }
            j += 1; // the opening quote
            loop {
                if j >= n {
                    break;
                }
                if c[j] == '\n' {
                    line += 1;
                }
                if c[j] == '"' && (0..hashes).all(|k| at(j + 1 + k) == '#') {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            i = j;
            out.push(Token {
                tok: Tok::Literal,
                line,
            });
        } else if ch == '"' || (ch == 'b' && at(i + 1) == '"') {
            let start_line = line;
            i += if ch == 'b' { 2 } else { 1 };
            while i < n && c[i] != '"' {
                if c[i] == '\n' {
                    line += 1;
                }
                i += if c[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push(Token {
                tok: Tok::Literal,
                line: start_line,
            });
        } else if ch == '\'' || (ch == 'b' && at(i + 1) == '\'') {
            let q = if ch == 'b' { i + 1 } else { i };
            if at(q + 1) == '\\' {
                // '\n', '\'', '\u{…}'
                let mut j = q + 3;
                while j < n && c[j] != '\'' {
                    j += 1;
                }
                i = j + 1;
                out.push(Token {
                    tok: Tok::Literal,
                    line,
                });
            } else if at(q + 2) == '\'' {
                i = q + 3;
                out.push(Token {
                    tok: Tok::Literal,
                    line,
                });
            } else {
                // A lifetime or label: the quote goes, the name is an ordinary identifier.
                i = q + 1;
            }
        } else if ch.is_alphabetic() || ch == '_' {
            let start = i;
            while i < n && (c[i].is_alphanumeric() || c[i] == '_') {
                i += 1;
            }
            let word: String = c[start..i].iter().collect();
            // r#ident: the raw identifier is the word after the hash.
            if word == "r" && at(i) == '#' && (at(i + 1).is_alphabetic() || at(i + 1) == '_') {
                continue;
            }
            out.push(Token {
                tok: Tok::Ident(word),
                line,
            });
        } else if ch.is_ascii_digit() {
            while i < n && (c[i].is_alphanumeric() || c[i] == '_') {
                i += 1;
            }
            out.push(Token {
                tok: Tok::Literal,
                line,
            });
        } else if ch == ':' && at(i + 1) == ':' {
            out.push(Token {
                tok: Tok::PathSep,
                line,
            });
            i += 2;
        } else {
            out.push(Token {
                tok: Tok::Punct(ch),
                line,
            });
            i += 1;
        }
    }
    out
}

/// Where the hashes of a raw string start, if one starts at `i` (and not inside a word).
fn raw_string_start(c: &[char], i: usize) -> Option<usize> {
    if i > 0 && (c[i - 1].is_alphanumeric() || c[i - 1] == '_') {
        return None;
    }
    let j = match (c.get(i), c.get(i + 1)) {
        (Some('r'), _) => i + 1,
        (Some('b'), Some('r')) => i + 2,
        _ => return None,
    };
    let mut k = j;
    while c.get(k) == Some(&'#') {
        k += 1;
    }
    (c.get(k) == Some(&'"')).then_some(j)
}

// ---------------------------------------------------------------------------------------------
// Modules, the paths each one writes, and the names each one imports.

type ModPath = Vec<String>;

/// One path into the crate written in a file: where, in which (possibly inline) module.
#[derive(Clone, Debug)]
struct RawRef {
    file: String,
    line: usize,
    /// The module the path is written in (file module plus any inline `mod x { … }`).
    context: ModPath,
    segs: Vec<String>,
}

#[derive(Default)]
struct Crate {
    /// Every module (file modules and inline ones) → the file module that holds it.
    modules: BTreeMap<ModPath, ModPath>,
    /// Every file module → its file (relative to src).
    files: BTreeMap<ModPath, String>,
    /// Modules declared `#[cfg(test)] mod …` (inline or file): their paths are not edges.
    tests: BTreeSet<ModPath>,
    /// (module, name) → the path that `use` bound to the name there.
    bindings: BTreeMap<(ModPath, String), RawRef>,
    refs: Vec<RawRef>,
}

/// The module a file under src is: `lib.rs` → the root, `a/mod.rs` and `a.rs` → `a`.
fn file_module(rel: &str) -> ModPath {
    let stem = rel.strip_suffix(".rs").unwrap_or(rel);
    let mut segs: ModPath = stem.split('/').map(str::to_owned).collect();
    if segs.last().is_some_and(|s| s == "mod") || stem == "lib" {
        segs.pop();
    }
    segs
}

fn ident(t: Option<&Token>) -> Option<&str> {
    match t.map(|t| &t.tok) {
        Some(Tok::Ident(s)) => Some(s),
        _ => None,
    }
}

/// The leaves of a use tree starting at `toks[*i]`: (full path, bound name, line).
fn use_tree(
    toks: &[Token],
    i: &mut usize,
    prefix: &[String],
    out: &mut Vec<(Vec<String>, String, usize)>,
) {
    let mut path = prefix.to_vec();
    let mut line = toks.get(*i).map_or(0, |t| t.line);
    if toks.get(*i).map(|t| &t.tok) == Some(&Tok::PathSep) {
        *i += 1; // `use ::extern_crate::…`
        path.push("::".into());
    }
    loop {
        match toks.get(*i).map(|t| &t.tok) {
            Some(Tok::Ident(s)) => {
                path.push(s.clone());
                line = toks[*i].line;
                *i += 1;
            }
            Some(Tok::Punct('{')) => {
                *i += 1;
                loop {
                    match toks.get(*i).map(|t| &t.tok) {
                        None => return,
                        Some(Tok::Punct('}')) => {
                            *i += 1;
                            return;
                        }
                        Some(Tok::Punct(',')) => *i += 1,
                        _ => use_tree(toks, i, &path, out),
                    }
                }
            }
            Some(Tok::Punct('*')) => {
                path.push("*".into());
                *i += 1;
                out.push((path, "*".into(), line));
                return;
            }
            _ => break,
        }
        if toks.get(*i).map(|t| &t.tok) == Some(&Tok::PathSep) {
            *i += 1;
        } else {
            break;
        }
    }
    if path.last().is_some_and(|s| s == "self") {
        path.pop();
    }
    let mut name = path.last().cloned().unwrap_or_default();
    if ident(toks.get(*i)) == Some("as") {
        name = ident(toks.get(*i + 1)).unwrap_or("_").to_owned();
        *i += 2;
    }
    if !path.is_empty() {
        out.push((path, name, line));
    }
}

/// Whether the item at `toks[at]` carries `#[cfg(test)]` (looked for back to the previous item).
fn cfg_test_before(toks: &[Token], at: usize) -> bool {
    let mut k = at;
    while k > 0 && !matches!(toks[k - 1].tok, Tok::Punct(';' | '{' | '}')) {
        k -= 1;
        let word = |d: usize| ident(toks.get(k + d));
        if word(0) == Some("cfg")
            && toks.get(k + 1).map(|t| &t.tok) == Some(&Tok::Punct('('))
            && word(2) == Some("test")
            && toks.get(k + 3).map(|t| &t.tok) == Some(&Tok::Punct(')'))
        {
            return true;
        }
    }
    false
}

fn parse_file(krate: &mut Crate, rel: &str, text: &str) {
    let file_mod = file_module(rel);
    let toks = tokenize(text);
    let mut depth = 0usize;
    let mut inline: Vec<(String, usize)> = Vec::new();
    let context = |inline: &[(String, usize)]| {
        let mut m = file_mod.clone();
        m.extend(inline.iter().map(|(n, _)| n.clone()));
        m
    };
    let mut i = 0;
    while i < toks.len() {
        match &toks[i].tok {
            Tok::Punct('{') => {
                depth += 1;
                i += 1;
            }
            Tok::Punct('}') => {
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
                depth = depth.saturating_sub(1);
                i += 1;
            }
            Tok::Ident(w) if w == "mod" => {
                if let Some(name) = ident(toks.get(i + 1)).filter(|_| cfg_test_before(&toks, i)) {
                    let mut m = context(&inline);
                    m.push(name.to_owned());
                    krate.tests.insert(m);
                }
                if let (Some(name), Some(Tok::Punct('{'))) =
                    (ident(toks.get(i + 1)), toks.get(i + 2).map(|t| &t.tok))
                {
                    inline.push((name.to_owned(), depth + 1));
                    // A file of the same path wins: an inline `mod x { … }` beside a `mod x;`
                    // of a file is its `#[cfg]` stand-in (`readiness/mod.rs`' `notify` off
                    // Linux). Letting it take the path hid every edge into the file behind its
                    // folder's face, and with them a circle (issue 34 item 4).
                    krate
                        .modules
                        .entry(context(&inline))
                        .or_insert_with(|| file_mod.clone());
                    i += 2;
                } else {
                    i += 1;
                }
            }
            Tok::Ident(w) if w == "use" => {
                i += 1;
                let mut leaves = Vec::new();
                use_tree(&toks, &mut i, &[], &mut leaves);
                let ctx = context(&inline);
                for (segs, name, line) in leaves {
                    let r = RawRef {
                        file: rel.to_owned(),
                        line,
                        context: ctx.clone(),
                        segs,
                    };
                    if name != "*" && name != "_" {
                        krate.bindings.insert((ctx.clone(), name), r.clone());
                    }
                    krate.refs.push(r);
                }
            }
            Tok::Ident(w) if i == 0 || toks[i - 1].tok != Tok::PathSep => {
                // A path in code: `crate::…`, `super::…`, `self::…`, or `child::…`.
                let first = w.clone();
                let mut segs = vec![first];
                let line = toks[i].line;
                let mut j = i + 1;
                while toks.get(j).map(|t| &t.tok) == Some(&Tok::PathSep) {
                    match ident(toks.get(j + 1)) {
                        Some(s) => {
                            segs.push(s.to_owned());
                            j += 2;
                        }
                        None => break,
                    }
                }
                if segs.len() > 1 {
                    krate.refs.push(RawRef {
                        file: rel.to_owned(),
                        line,
                        context: context(&inline),
                        segs,
                    });
                }
                i = j.max(i + 1);
            }
            _ => i += 1,
        }
    }
}

impl Crate {
    fn from_sources(sources: &[(String, String)]) -> Crate {
        let mut krate = Crate::default();
        for (rel, _) in sources {
            let m = file_module(rel);
            krate.modules.insert(m.clone(), m.clone());
            krate.files.insert(m, rel.clone());
        }
        krate.modules.insert(Vec::new(), Vec::new());
        for (rel, text) in sources {
            parse_file(&mut krate, rel, text);
        }
        krate
    }

    /// The absolute path a written path means, or `None` when it leaves the crate.
    fn absolute(&self, r: &RawRef, budget: usize) -> Option<ModPath> {
        let segs = &r.segs;
        let first = segs.first()?.as_str();
        let mut abs = match first {
            "crate" | "$crate" => segs[1..].to_vec(),
            "self" => [r.context.clone(), segs[1..].to_vec()].concat(),
            "super" => {
                let mut base = r.context.clone();
                let mut k = 0;
                while segs.get(k).is_some_and(|s| s == "super") {
                    base.pop();
                    k += 1;
                }
                [base, segs[k..].to_vec()].concat()
            }
            _ => {
                let mut child = r.context.clone();
                child.push(first.to_owned());
                if self.modules.contains_key(&child) {
                    [r.context.clone(), segs.clone()].concat()
                } else if let Some(b) = self.bindings.get(&(r.context.clone(), first.to_owned())) {
                    if budget == 0 || std::ptr::eq(b, r) || b.segs == *segs {
                        return None;
                    }
                    let mut abs = self.absolute(b, budget - 1)?;
                    abs.extend_from_slice(&segs[1..]);
                    abs
                } else {
                    return None;
                }
            }
        };
        // Follow names imported into the module the path passes through.
        for _ in 0..budget {
            let (module, rest) = self.longest_module(&abs);
            let Some(next) = rest.first() else { break };
            let key = (module.clone(), next.clone());
            let Some(b) = self.bindings.get(&key) else {
                break;
            };
            if budget == 0 {
                break;
            }
            let Some(mut target) = self.absolute(b, budget - 1) else {
                break;
            };
            if target == abs {
                break;
            }
            target.extend_from_slice(&rest[1..]);
            abs = target;
        }
        Some(abs)
    }

    fn longest_module(&self, abs: &[String]) -> (ModPath, Vec<String>) {
        for k in (0..=abs.len()).rev() {
            if self.modules.contains_key(&abs[..k]) {
                return (abs[..k].to_vec(), abs[k..].to_vec());
            }
        }
        (Vec::new(), abs.to_vec())
    }

    /// Every edge between file modules: (from, to) → its first `file:line`.
    fn edges(&self) -> BTreeMap<(ModPath, ModPath), String> {
        let mut edges: BTreeMap<(ModPath, ModPath), (String, usize)> = BTreeMap::new();
        for r in &self.refs {
            if self.tests.iter().any(|t| r.context.starts_with(t)) {
                continue;
            }
            let Some(abs) = self.absolute(r, 16) else {
                continue;
            };
            let (module, _) = self.longest_module(&abs);
            let to = self.modules[&module].clone();
            let from = self
                .modules
                .get(&r.context)
                .cloned()
                .unwrap_or_else(|| r.context.clone());
            if from == to {
                continue;
            }
            let at = (r.file.clone(), r.line);
            edges
                .entry((from, to))
                .and_modify(|e| *e = (*e).clone().min(at.clone()))
                .or_insert(at);
        }
        edges
            .into_iter()
            .map(|(k, (f, l))| (k, format!("{f}:{l}")))
            .collect()
    }
}

// ---------------------------------------------------------------------------------------------
// The checks.

fn show(m: &[String]) -> String {
    if m.is_empty() {
        "crate".into()
    } else {
        m.join("::")
    }
}

/// Folder by folder, the graph between the folder's children; every circle, each edge with
/// its `file:line`. Returns one message per circle.
fn cycles(krate: &Crate) -> Vec<String> {
    let edges = krate.edges();
    let folders: BTreeSet<ModPath> = krate
        .files
        .keys()
        .filter(|m| !m.is_empty())
        .map(|m| m[..m.len() - 1].to_vec())
        .collect();
    let mut found = Vec::new();
    for folder in &folders {
        let d = folder.len();
        let under = |m: &ModPath| m.len() > d && m[..d] == folder[..];
        let mut graph: BTreeMap<ModPath, BTreeMap<ModPath, String>> = BTreeMap::new();
        for ((from, to), at) in &edges {
            if under(from) && under(to) && from[d] != to[d] {
                let (u, v) = (from[..=d].to_vec(), to[..=d].to_vec());
                graph
                    .entry(u)
                    .or_default()
                    .entry(v)
                    .or_insert_with(|| format!("{at} ({} -> {})", show(from), show(to)));
            }
        }
        found.extend(circles_in(&graph));
    }
    found
}

/// The circles of one graph: for each edge u → v inside a strongly connected part, the
/// shortest way back v → u closes one; each circle is reported once.
fn circles_in(graph: &BTreeMap<ModPath, BTreeMap<ModPath, String>>) -> Vec<String> {
    let mut seen: BTreeSet<Vec<ModPath>> = BTreeSet::new();
    let mut out = Vec::new();
    for (u, outs) in graph {
        for v in outs.keys() {
            // Breadth-first from v back to u.
            let mut prev: BTreeMap<ModPath, ModPath> = BTreeMap::new();
            let mut queue = VecDeque::from([v.clone()]);
            let mut reached = v == u;
            while let Some(x) = queue.pop_front() {
                if &x == u {
                    reached = true;
                    break;
                }
                for y in graph.get(&x).into_iter().flat_map(|m| m.keys()) {
                    if y != v && !prev.contains_key(y) {
                        prev.insert(y.clone(), x.clone());
                        queue.push_back(y.clone());
                    }
                }
            }
            if !reached {
                continue;
            }
            let mut ring = vec![u.clone()];
            let mut x = u.clone();
            while &x != v {
                x = prev[&x].clone();
                ring.push(x.clone());
            }
            ring.reverse(); // v … u
            ring.rotate_right(1); // u v … (back to u)
            let start = ring
                .iter()
                .enumerate()
                .min_by_key(|(_, m)| (*m).clone())
                .map_or(0, |(k, _)| k);
            let mut key = ring.clone();
            key.rotate_left(start);
            if !seen.insert(key.clone()) {
                continue;
            }
            let mut msg = format!(
                "import circle {}:",
                key.iter()
                    .chain(key.first())
                    .map(|m| show(m))
                    .collect::<Vec<_>>()
                    .join(" -> ")
            );
            for k in 0..key.len() {
                let (a, b) = (&key[k], &key[(k + 1) % key.len()]);
                let _ = write!(msg, "\n    {} -> {}: {}", show(a), show(b), graph[a][b]);
            }
            out.push(msg);
        }
    }
    out
}

/// At the root: every top-level folder/module has a layer, and imports go down or sideways.
fn layer_violations(krate: &Crate, layers: &[(&str, usize)]) -> Vec<String> {
    let rank = |m: &ModPath| layers.iter().find(|(n, _)| *n == m[0]).map(|(_, r)| *r);
    let mut out = Vec::new();
    let tops: BTreeSet<ModPath> = krate
        .files
        .keys()
        .filter(|m| !m.is_empty())
        .map(|m| vec![m[0].clone()])
        .collect();
    for top in &tops {
        if rank(top).is_none() {
            out.push(format!(
                "src/{}: top-level module `{}` is in no layer: move it into a layer's folder, or add it to LAYERS",
                krate.files.get(top).cloned().unwrap_or_else(|| format!("{}/", top[0])),
                top[0]
            ));
        }
    }
    for ((from, to), at) in krate.edges() {
        if from.is_empty() || to.is_empty() || from[0] == to[0] {
            continue;
        }
        if let (Some(rf), Some(rt)) = (rank(&from), rank(&to)) {
            if rf < rt {
                out.push(format!(
                    "upward import {at}: {} (layer {}, rank {rf}) uses {} (layer {}, rank {rt})",
                    show(&from),
                    from[0],
                    show(&to),
                    to[0]
                ));
            }
        }
    }
    out
}

fn long_files(sources: &[(String, String)], allowed: &[(&str, &str)]) -> Vec<String> {
    let mut out = Vec::new();
    for (rel, text) in sources {
        let lines = text.lines().count();
        if lines > MAX_LINES && !allowed.iter().any(|(f, _)| f == rel) {
            out.push(format!(
                "src/{rel}: {lines} lines, over {MAX_LINES}: split it by what its parts do, or add it to LONG_FILES with the reason"
            ));
        }
    }
    for (f, reason) in allowed {
        assert!(!reason.trim().is_empty(), "LONG_FILES: {f} has no reason");
        match sources.iter().find(|(rel, _)| rel == f) {
            None => out.push(format!(
                "LONG_FILES names src/{f}, which does not exist (moved? update the entry)"
            )),
            // An entry outliving its reason would let the file grow back unnoticed.
            Some((_, text)) if text.lines().count() <= MAX_LINES => out.push(format!(
                "LONG_FILES names src/{f}, which is now {} lines, within {MAX_LINES}: remove the entry",
                text.lines().count()
            )),
            Some(_) => {}
        }
    }
    out
}

fn library_sources() -> Vec<(String, String)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../crates/childguard/src");
    let mut out = Vec::new();
    let mut dirs = vec![src.clone()];
    while let Some(dir) = dirs.pop() {
        let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for entry in entries {
            let path = entry
                .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
                .path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path
                    .strip_prefix(&src)
                    .expect("under src")
                    .to_string_lossy()
                    .replace('\\', "/");
                let text = std::fs::read_to_string(&path)
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                out.push((rel, text));
            }
        }
    }
    out.sort();
    assert!(
        out.iter().any(|(rel, _)| rel == "lib.rs"),
        "no lib.rs under {}",
        src.display()
    );
    out
}

fn fail_on(what: &str, problems: Vec<String>) {
    assert!(
        problems.is_empty(),
        "{what} in crates/childguard/src:\n{}",
        problems.join("\n")
    );
}

#[test]
fn library_modules_have_no_import_circle() {
    let krate = Crate::from_sources(&library_sources());
    fail_on("module import circles", cycles(&krate));
}

#[test]
fn library_imports_go_down_the_layers() {
    let krate = Crate::from_sources(&library_sources());
    fail_on(
        "imports against the layer order",
        layer_violations(&krate, LAYERS),
    );
}

#[test]
fn library_files_are_short() {
    fail_on("files too long", long_files(&library_sources(), LONG_FILES));
}

// ---------------------------------------------------------------------------------------------
// The checker can fail.

fn synthetic(files: &[(&str, &str)]) -> Crate {
    let sources: Vec<(String, String)> = files
        .iter()
        .map(|(f, t)| (f.to_string(), t.to_string()))
        .collect();
    Crate::from_sources(&sources)
}

#[test]
fn checker_reports_a_two_module_circle() {
    let krate = synthetic(&[
        ("lib.rs", "mod a;\nmod b;\nmod c;\n"),
        ("a.rs", "// use crate::b; (a comment)\nconst S: &str = \"crate::b::X\";\nuse crate::{\n    b::Thing,\n};\n"),
        ("b.rs", "/// [`crate::a`]\npub struct Thing;\nfn f() { crate::a::g(); }\n#[cfg(test)]\nmod tests {\n    use crate::c::X;\n}\n"),
        ("c.rs", "pub struct X;\nfn f() -> crate::b::Thing { todo!() }\n"),
    ]);
    let found = cycles(&krate);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(found[0].contains("a -> b: a.rs:4"), "{}", found[0]);
    assert!(found[0].contains("b -> a: b.rs:3"), "{}", found[0]);
}

#[test]
fn checker_follows_super_reexports_and_folders() {
    // p/x.rs reaches q through p's re-export; q reaches p::x through `super`-free paths.
    let krate = synthetic(&[
        ("lib.rs", "mod p;\nmod q;\n"),
        ("p/mod.rs", "mod x;\nmod y;\npub(crate) use crate::q::Q;\n"),
        ("p/x.rs", "use super::Q;\n"),
        ("p/y.rs", "fn f() { super::x::h(); }\n"),
        (
            "q.rs",
            "pub struct Q;\nmod tests {\n    use super::super::p;\n}\n",
        ),
    ]);
    let found = cycles(&krate);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(found[0].contains("p -> q: p/mod.rs:3"), "{}", found[0]);
    let edges = krate.edges();
    let p_x = vec!["p".to_string(), "x".to_string()];
    assert_eq!(
        edges.get(&(p_x, vec!["q".to_string()])).map(String::as_str),
        Some("p/x.rs:1")
    );
    assert!(found[0].contains("q -> p: q.rs:3"), "{}", found[0]);
    // Inside p: y -> x only, no circle; upward: q (rank 0) uses p (rank 1).
    let up = layer_violations(&krate, &[("q", 0), ("p", 1)]);
    assert_eq!(up.len(), 1, "{up:#?}");
    assert!(
        up[0].contains("q.rs:3") && up[0].contains("uses p"),
        "{}",
        up[0]
    );
}

#[test]
fn checker_reports_a_circle_inside_a_folder_and_a_long_file() {
    let krate = synthetic(&[
        ("lib.rs", "mod f;\n"),
        ("f/mod.rs", "mod a;\nmod b;\n"),
        ("f/a.rs", "use super::b::B;\npub struct A;\n"),
        (
            "f/b.rs",
            "pub struct B;\nfn g() -> super::a::A { todo!() }\n",
        ),
    ]);
    let found = cycles(&krate);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(
        found[0].contains("f::a -> f::b: f/a.rs:1") && found[0].contains("f::b -> f::a: f/b.rs:2"),
        "{}",
        found[0]
    );

    let long = "fn f() {}\n".repeat(MAX_LINES + 1);
    let sources = vec![
        ("lib.rs".to_string(), long.clone()),
        ("ok.rs".to_string(), long),
    ];
    let problems = long_files(&sources, &[("ok.rs", "a reason")]);
    assert_eq!(problems.len(), 1, "{problems:#?}");
    assert!(
        problems[0].starts_with("src/lib.rs: 501 lines"),
        "{}",
        problems[0]
    );
}

#[test]
fn checker_sees_an_inline_path_into_a_module_with_a_cfg_stand_in() {
    // The shape that hid a real circle: `n` is a file on one platform and an inline stand-in
    // on the other; `w` reaches into `n` only by a path written in code (no `use`).
    let krate = synthetic(&[
        ("lib.rs", "mod p;\n"),
        (
            "p/mod.rs",
            "#[cfg(unix)]\nmod n;\nmod w;\n#[cfg(not(unix))]\nmod n {\n    pub(crate) const M: usize = 1;\n}\n",
        ),
        ("p/n.rs", "use super::w;\npub(crate) const M: usize = 1;\n"),
        ("p/w.rs", "fn f() -> Vec<u8> { vec![0u8; super::n::M + 1] }\n"),
    ]);
    let found = cycles(&krate);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(
        found[0].contains("p/w.rs:1") && found[0].contains("p/n.rs:1"),
        "{found:#?}"
    );
}

#[test]
fn checker_reports_a_long_files_entry_that_is_short_again() {
    let sources = vec![("short.rs".to_string(), "fn f() {}\n".to_string())];
    let problems = long_files(&sources, &[("short.rs", "it was long once")]);
    assert_eq!(problems.len(), 1, "{problems:#?}");
    assert!(
        problems[0].contains("src/short.rs, which is now 1 lines"),
        "{}",
        problems[0]
    );
}
