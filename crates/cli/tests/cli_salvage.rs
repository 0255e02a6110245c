//! An import, a clean close, then a value-log file cut short: no
//! acknowledged record may be lost silently. `verify` must report
//! it (exit 3), other commands must refuse the store with an error naming
//! the file, and `salvage` must hand back every record that can be read,
//! say what could not be, and feed `import` into a new store.

use std::path::{Path, PathBuf};

mod common;
use common::gvault_input;

/// The value-log file holding the most bytes (values live there).
fn largest_log(dir: &Path) -> PathBuf {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "vlog"))
        .max_by_key(|p| std::fs::metadata(p).unwrap().len())
        .unwrap()
}

/// The value of record `i`: over the store's 1 KiB value threshold, so
/// values live in the value log and tables point to them.
fn value(i: usize) -> String {
    format!("value of record {i} {}", "x".repeat(1100))
}

fn records(n: usize) -> String {
    (0..n)
        .map(|i| format!("{{\"key\": \"rec{i:06}\", \"value\": \"{}\"}}\n", value(i)))
        .collect()
}

const RECORDS: usize = 5000;

fn cut_store(encrypt: bool) -> (tempfile::TempDir, PathBuf) {
    let d = tempfile::tempdir().unwrap();
    let store = d.path().join("store");
    let s = store.to_str().unwrap();
    let mut init = vec!["init", "--store", s];
    if encrypt {
        init.push("--encrypt");
    }
    assert!(gvault_input(&store, &init, None).status.success());
    let o = gvault_input(&store, &["import"], Some(records(RECORDS).as_bytes()));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let log = largest_log(&store);
    let len = std::fs::metadata(&log).unwrap().len();
    let enc = encrypt.then(|| {
        let key = gvault_store::keys::read_key_file(&d.path().join("store.key")).unwrap();
        gvault_store::Encryption::with_key(key)
    });
    let frames = gvault_store::block_extents_with(&log, enc.as_ref()).unwrap();
    // Cut at a frame boundary about half way: a cut that looks like a log
    // that simply ended there, were the head's size not recorded.
    let cut = frames[frames.len() / 2].0;
    assert!(cut < len);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&log)
        .unwrap()
        .set_len(cut)
        .unwrap();
    (d, store)
}

fn check(encrypt: bool) {
    let (d, store) = cut_store(encrypt);
    let log = largest_log(&store);
    let name = log.file_name().unwrap().to_string_lossy().into_owned();

    let v = gvault_input(&store, &["verify"], None);
    assert_eq!(v.status.code(), Some(3), "verify: {v:?}");
    assert!(String::from_utf8_lossy(&v.stdout).contains(&name), "{v:?}");

    let g = gvault_input(&store, &["get", "rec000001"], None);
    assert_eq!(g.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&g.stderr).contains(&name), "{g:?}");

    let s = gvault_input(&store, &["salvage"], None);
    assert_eq!(
        s.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&s.stderr)
    );
    let report = String::from_utf8_lossy(&s.stderr);
    assert!(report.contains(&name), "{report}");
    let lines: Vec<&str> = std::str::from_utf8(&s.stdout).unwrap().lines().collect();
    assert!(
        lines.len() > RECORDS / 10 && lines.len() < RECORDS,
        "{} records",
        lines.len()
    );
    // Every record salvaged is one that was imported, unchanged.
    for l in &lines {
        let r: serde_json::Value = serde_json::from_str(l).unwrap();
        let k = r["key"].as_str().unwrap();
        let i: usize = k.trim_start_matches("rec").parse().unwrap();
        assert_eq!(r["value"].as_str().unwrap(), value(i));
    }

    // Into a new store, through import.
    let fresh = d.path().join("fresh");
    let f = fresh.to_str().unwrap();
    assert!(gvault_input(&fresh, &["init", "--store", f], None)
        .status
        .success());
    let o = gvault_input(&fresh, &["import", "--store", f], Some(&s.stdout));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v = gvault_input(&fresh, &["verify", "--store", f, "--json"], None);
    assert_eq!(v.status.code(), Some(0));
    let e = gvault_input(&fresh, &["export", "--store", f], None);
    assert_eq!(
        e.stdout, s.stdout,
        "the new store holds exactly what was salvaged"
    );
}

#[test]
fn a_cut_log_after_import_is_reported_and_salvaged_plain() {
    check(false)
}

#[test]
fn a_cut_log_after_import_is_reported_and_salvaged_encrypted() {
    check(true)
}

#[test]
fn salvage_of_a_sound_store_loses_nothing() {
    let d = tempfile::tempdir().unwrap();
    let store = d.path().join("store");
    let s = store.to_str().unwrap();
    assert!(gvault_input(&store, &["init", "--store", s], None)
        .status
        .success());
    assert!(
        gvault_input(&store, &["import"], Some(records(500).as_bytes()))
            .status
            .success()
    );
    let out = gvault_input(&store, &["salvage", "--json"], None);
    assert_eq!(out.status.code(), Some(0));
    let r: serde_json::Value = serde_json::from_slice(&out.stderr).unwrap();
    assert_eq!(r["records"], 500);
    assert_eq!(r["clean"], true);
    assert_eq!(out.stdout, gvault_input(&store, &["export"], None).stdout);
}
