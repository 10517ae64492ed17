//! docs/env.md's table names every `FREERIDE_*` variable the repository's code uses, and only
//! those: the names in Rust and Python string literals, and in shell scripts, deployment files and
//! units (comment lines left out).
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `FREERIDE_[A-Z0-9_]+` words of `text`.
fn names(text: &str, out: &mut BTreeSet<String>) {
    let b = text.as_bytes();
    let mut i = 0;
    while let Some(at) = text[i..].find("FREERIDE_") {
        let start = i + at;
        let mut end = start + "FREERIDE_".len();
        while end < b.len()
            && (b[end].is_ascii_uppercase() || b[end].is_ascii_digit() || b[end] == b'_')
        {
            end += 1;
        }
        let before_ok =
            start == 0 || !(b[start - 1].is_ascii_alphanumeric() || b[start - 1] == b'_');
        let name = text[start..end].trim_end_matches('_');
        if before_ok && name.len() > "FREERIDE_".len() {
            out.insert(name.to_string());
        }
        i = end;
    }
}

/// The contents of the string literals (quoted by any of `quotes`) of `line`.
fn literals(line: &str, quotes: &[char]) -> Vec<String> {
    let mut out = vec![];
    let mut cur: Option<(char, String)> = None;
    let mut escaped = false;
    for c in line.chars() {
        match &mut cur {
            Some((q, s)) => {
                if escaped {
                    escaped = false;
                    s.push(c);
                } else if c == '\\' {
                    escaped = true;
                } else if c == *q {
                    out.push(std::mem::take(s));
                    cur = None;
                } else {
                    s.push(c);
                }
            }
            None if quotes.contains(&c) => cur = Some((c, String::new())),
            None => {}
        }
    }
    out
}

fn used_in(path: &Path, out: &mut BTreeSet<String>) {
    let Ok(text) = std::fs::read_to_string(path) else {
        return;
    };
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    for line in text.lines() {
        let t = line.trim_start();
        match ext {
            "rs" if !t.starts_with("//") => {
                for l in literals(line, &['"']) {
                    names(&l, out);
                }
            }
            "py" if !t.starts_with('#') => {
                for l in literals(line, &['"', '\'']) {
                    names(&l, out);
                }
            }
            "rs" | "py" => {}
            _ if !t.starts_with('#') => names(line, out),
            _ => {}
        }
    }
}

fn walk(dir: &Path, out: &mut BTreeSet<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if p.is_dir() {
            if !matches!(name.as_str(), "target" | ".git" | "docs" | "__pycache__") {
                walk(&p, out);
            }
            continue;
        }
        let ext = p.extension().and_then(|e| e.to_str()).unwrap_or("");
        let script_dir = p
            .components()
            .any(|c| c.as_os_str() == "scripts" || c.as_os_str() == "deploy");
        let code = matches!(
            ext,
            "rs" | "py" | "sh" | "yaml" | "yml" | "service" | "toml"
        ) || name == "Dockerfile"
            || (script_dir && ext.is_empty())
            || name == "run"
                && p.parent()
                    .and_then(Path::file_name)
                    .is_some_and(|d| d == ".ci");
        // This file's own examples are not uses.
        if code && name != "env_table.rs" {
            used_in(&p, out);
        }
    }
}

/// The first-column names of docs/env.md's table.
fn documented() -> BTreeSet<String> {
    let text = std::fs::read_to_string(root().join("docs/env.md")).expect("docs/env.md");
    text.lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .filter(|n| n.starts_with("FREERIDE_"))
        .map(str::to_string)
        .collect()
}

#[test]
fn the_variable_table_matches_the_code() {
    let mut used = BTreeSet::new();
    walk(&root(), &mut used);
    let doc = documented();
    assert!(
        used.contains("FREERIDE_DIR") && doc.contains("FREERIDE_DIR"),
        "{used:?} {doc:?}"
    );
    let missing: Vec<_> = used.difference(&doc).collect();
    let stale: Vec<_> = doc.difference(&used).collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "docs/env.md lacks {missing:?}; documents variables no code uses: {stale:?}"
    );
}

#[test]
fn names_come_from_literals_and_whole_words() {
    let mut s = BTreeSet::new();
    for l in literals(r#"let a = env("FREERIDE_A\"x") + FREERIDE_NOPE;"#, &['"']) {
        names(&l, &mut s);
    }
    names(
        "export FREERIDE_B=1 XFREERIDE_C FREERIDE_* FREERIDE_",
        &mut s,
    );
    assert_eq!(
        s.into_iter().collect::<Vec<_>>(),
        ["FREERIDE_A", "FREERIDE_B"]
    );
}
