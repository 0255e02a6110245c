//! The settings table (`gvault_accel::tuning::SETTINGS`), `docs/tuning.md`
//! and the code agree: every `GVAULT_*` name the product's sources mention
//! is in the table, and the document lists each row of the table.

use std::path::{Path, PathBuf};

use gvault_accel::tuning::SETTINGS;

/// Names only the test harnesses use, to pass roles and paths to the
/// processes they start.
const HARNESS_PREFIXES: [&str; 2] = ["GVAULT_TEST_", "GVAULT_CRASH_"];

/// What scripts/s3-server.sh tells the S3 tests about the server it
/// started for them (its bucket and process ids).
const HARNESS_NAMES: [&str; 3] = ["GVAULT_S3_BUCKET", "GVAULT_S3_PID", "GVAULT_S3_PARENT_PID"];

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn rust_sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

fn names_in(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("GVAULT_") {
        let tail = &rest[i..];
        let end = tail
            .find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(tail.len());
        let name = &tail[..end];
        if name.len() > "GVAULT_".len() {
            names.push(name.to_string());
        }
        rest = &tail[end..];
    }
    names
}

#[test]
fn every_name_in_the_sources_is_in_the_table() {
    let mut files = Vec::new();
    for krate in std::fs::read_dir(repo_root().join("crates")).expect("crates/") {
        let krate = krate.expect("crates/ entry").path();
        rust_sources(&krate.join("src"), &mut files);
        rust_sources(&krate.join("tests"), &mut files);
    }
    assert!(files.len() > 20, "found only {} sources", files.len());
    let mut missing = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).expect("read source");
        for name in names_in(&text) {
            let known = SETTINGS.iter().any(|s| s.name == name)
                || HARNESS_PREFIXES.iter().any(|p| name.starts_with(p))
                || HARNESS_NAMES.contains(&name.as_str());
            if !known {
                missing.push(format!("{name} ({})", f.display()));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "GVAULT_* names not in tuning::SETTINGS: {missing:?}"
    );
}

#[test]
fn the_document_lists_every_setting() {
    let doc = std::fs::read_to_string(repo_root().join("docs/tuning.md")).expect("docs/tuning.md");
    for s in SETTINGS {
        assert!(
            doc.contains(&format!("`{}`", s.name)),
            "docs/tuning.md does not list {}",
            s.name
        );
    }
    for name in names_in(&doc) {
        assert!(
            SETTINGS.iter().any(|s| s.name == name)
                || HARNESS_PREFIXES.iter().any(|p| name.starts_with(p))
                || HARNESS_NAMES.contains(&name.as_str()),
            "docs/tuning.md lists {name}, which the table does not have"
        );
    }
}
