//! The store commands of the `gvault` binary: behaviour and exit codes.

use std::path::Path;

mod common;
use common::{code, gvault_input};

#[test]
fn commands_and_exit_codes() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let d = dir.as_path();

    let o = gvault_input(d, &["get", "k"], None);
    assert_eq!(code(&o), 2, "no store yet");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("no store"),
        "{o:?}"
    );

    assert_eq!(code(&gvault_input(d, &["init"], None)), 0);
    assert_eq!(code(&gvault_input(d, &["init"], None)), 2, "init twice");
    assert_eq!(code(&gvault_input(d, &["put", "a", "1"], None)), 0);
    assert_eq!(
        code(&gvault_input(
            d,
            &["put", "--sync", "b"],
            Some(b"from stdin")
        )),
        0
    );
    let f = tmp.path().join("v.bin");
    std::fs::write(&f, vec![9u8; 5000]).unwrap();
    assert_eq!(
        code(&gvault_input(
            d,
            &["put", "big", "--file", f.to_str().unwrap()],
            None
        )),
        0
    );

    let o = gvault_input(d, &["get", "b"], None);
    assert_eq!((code(&o), o.stdout.as_slice()), (0, &b"from stdin"[..]));
    let o = gvault_input(d, &["get", "big"], None);
    assert_eq!(o.stdout, vec![9u8; 5000]);
    assert_eq!(code(&gvault_input(d, &["get", "nope"], None)), 1);
    assert_eq!(code(&gvault_input(d, &["del", "nope"], None)), 1);
    assert_eq!(code(&gvault_input(d, &["del", "a"], None)), 0);
    assert_eq!(code(&gvault_input(d, &["get", "a"], None)), 1);

    let lines = b"{\"key\": \"j1\", \"value\": \"x\"}\n{\"key\": \"j2\", \"value\": \"y\"}\n";
    let o = gvault_input(d, &["import"], Some(lines));
    assert_eq!(code(&o), 0, "{o:?}");
    let o = gvault_input(d, &["import"], Some(b"{\"key\": 1}\n"));
    assert_eq!(code(&o), 2);
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("line 1")
            && String::from_utf8_lossy(&o.stderr).contains("nothing was imported"),
        "{o:?}"
    );

    let o = gvault_input(
        d,
        &["scan", "--from", "b", "--to", "j2", "--keys-only"],
        None,
    );
    assert_eq!(String::from_utf8_lossy(&o.stdout), "b\nbig\nj1\n");
    let o = gvault_input(d, &["scan", "--reverse", "--limit", "1"], None);
    assert_eq!(String::from_utf8_lossy(&o.stdout), "j2\ty\n");
    let o = gvault_input(
        d,
        &["scan", "--from", "j2", "--to", "b", "--keys-only"],
        None,
    );
    assert_eq!(code(&o), 2, "{o:?}");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("comes after --to"),
        "{o:?}"
    );
    let o = gvault_input(
        d,
        &[
            "scan",
            "--from",
            "b",
            "--to",
            "j2",
            "--keys-only",
            "--reverse",
        ],
        None,
    );
    assert_eq!(String::from_utf8_lossy(&o.stdout), "j1\nbig\nb\n");

    // A value over the store's 1 GiB limit is refused before it is read
    // (the file is sparse: nothing of it is written or read here).
    let huge = d.with_extension("huge");
    std::fs::File::create(&huge)
        .unwrap()
        .set_len((1 << 30) + 1)
        .unwrap();
    let o = gvault_input(d, &["put", "huge", "--file", huge.to_str().unwrap()], None);
    assert_eq!(code(&o), 2, "{o:?}");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("the most one value holds"),
        "{o:?}"
    );
    std::fs::remove_file(&huge).unwrap();

    let o = gvault_input(d, &["stats"], None);
    assert!(String::from_utf8_lossy(&o.stdout).contains("last sequence"));
    let o = gvault_input(d, &["gc"], None);
    assert_eq!(code(&o), 0, "{o:?}");
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("scanned"),
        "{o:?}"
    );
    let o = gvault_input(d, &["verify"], None);
    assert_eq!(code(&o), 0, "{o:?}");
    assert!(String::from_utf8_lossy(&o.stdout).contains("no problems"));

    // Damage a value and verify says so. (Value-log files without values
    // are dropped once flushed: look for the one holding "big".)
    let (log, mut bytes, at) = std::fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "vlog"))
        .find_map(|p| {
            let bytes = std::fs::read(&p).unwrap();
            let at = bytes.windows(16).position(|w| w == [9u8; 16])?;
            Some((p, bytes, at))
        })
        .expect("a value-log file holds the value of \"big\"");
    bytes[at] ^= 1;
    std::fs::write(&log, bytes).unwrap();
    let o = gvault_input(d, &["verify"], None);
    assert_eq!(code(&o), 3, "{o:?}");
    let o = gvault_input(d, &["get", "big"], None);
    assert_eq!(code(&o), 2);
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("corruption"),
        "{o:?}"
    );
}

#[test]
fn demo_runs_small() {
    let o = gvault_input(Path::new("/nonexistent"), &["demo", "--mb", "4"], None);
    assert_eq!(code(&o), 0, "{o:?}");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("MiB/s"));
    // The dedup part: the second backup adds a small share of the first.
    let line = out
        .lines()
        .find(|l| l.contains("of the first backup's"))
        .unwrap_or_else(|| panic!("no dedup line in {out}"));
    let pct: f64 = line
        .rsplit(", ")
        .next()
        .and_then(|s| s.split('%').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no share in {line}"));
    assert!(pct < 50.0, "{line}");
    assert!(out.contains("checked every byte: identical"), "{out}");
}

/// The `N tables` of `level L:` in `gvault stats` output (0 if absent).
fn tables_in_level(stats: &str, level: usize) -> usize {
    let prefix = format!("level {level}:");
    stats
        .lines()
        .find(|l| l.starts_with(&prefix))
        .and_then(|l| l[prefix.len()..].split_whitespace().next())
        .map_or(0, |n| n.parse().unwrap())
}

#[test]
fn one_shot_puts_keep_level_0_bounded_and_compact_shrinks_the_store() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let d = dir.as_path();
    assert_eq!(code(&gvault_input(d, &["init"], None)), 0);
    // Each command is its own process: its background thread never gets
    // to compact, so `close` (and the next open) must.
    for i in 0..60u32 {
        let key = format!("k{:03}", i * 37 % 60);
        let value = format!("{i:0100}");
        let o = gvault_input(d, &["put", &key, &value], None);
        assert_eq!(code(&o), 0, "{o:?}");
        if i % 20 == 19 {
            let o = gvault_input(d, &["stats"], None);
            let stats = String::from_utf8_lossy(&o.stdout).to_string();
            assert!(tables_in_level(&stats, 0) <= 4, "after {i} puts:\n{stats}");
        }
    }
    // Overwrite everything, then compact: the old versions go.
    for i in 0..60u32 {
        let o = gvault_input(d, &["put", &format!("k{i:03}"), "new"], None);
        assert_eq!(code(&o), 0, "{o:?}");
    }
    let o = gvault_input(d, &["compact"], None);
    assert_eq!(code(&o), 0, "{o:?}");
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    let sizes: Vec<u64> = out
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("compacted: "))
        .map(|l| {
            l.split(" bytes")
                .next()
                .unwrap()
                .split(" -> ")
                .map(|n| n.parse().unwrap())
                .collect()
        })
        .unwrap_or_else(|| panic!("{out}"));
    assert!(sizes[1] < sizes[0], "{out}");
    assert!(out.contains("value-log GC"), "{out}");
    let o = gvault_input(d, &["stats"], None);
    let stats = String::from_utf8_lossy(&o.stdout).to_string();
    assert_eq!(tables_in_level(&stats, 0), 0, "{stats}");
    for i in (0..60u32).step_by(7) {
        let o = gvault_input(d, &["get", &format!("k{i:03}")], None);
        assert_eq!(o.stdout, b"new");
    }
}
