//! `gvault bench lsm` through the real binary, with tiny sizes: every
//! requested workload is reported, with non-zero operations and sane
//! figures, and bad input is refused with a clear error.

use std::collections::BTreeSet;
use std::process::{Command, Output};

fn gvault(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gvault"))
        .args(args)
        .output()
        .expect("cargo builds the gvault binary for its tests")
}

const DB_BENCH: [&str; 6] = [
    "fillseq",
    "fillrandom",
    "overwrite",
    "readrandom",
    "readseq",
    "readwhilewriting",
];
const SEED: [&str; 3] = ["seed000-insert", "seed000-search", "seed000-remove"];

#[test]
fn every_workload_reports_ops_throughput_and_write_amplification() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_str().unwrap();
    let o = gvault(&[
        "bench",
        "lsm",
        "--json",
        "--quick",
        "--dir",
        dir,
        "--num",
        "300",
        "--seed-keys",
        "200",
        "--value-sizes",
        "100,4K",
        "--objects",
        "1,16",
        "--sync",
        "both",
        "--threads",
        "2",
    ]);
    assert!(
        o.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let report: serde_json::Value =
        serde_json::from_slice(&o.stdout).expect("stdout is one JSON document");
    let rows = report["rows"].as_array().expect("rows array");

    let mut seen = BTreeSet::new();
    for r in rows {
        let w = r["workload"].as_str().unwrap();
        let size = r["value_bytes"].as_u64().unwrap();
        let sync = r["sync"].as_bool();
        seen.insert((w.to_string(), size, sync));
        assert!(r["ops"].as_u64().unwrap() > 0, "{r}");
        assert!(r["ops_per_sec"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["mb_per_sec"].as_f64().unwrap() > 0.0, "{r}");
        let read_only = matches!(w, "readrandom" | "readseq" | "seed000-search");
        assert_eq!(
            sync.is_none(),
            read_only,
            "sync applies to writers only: {r}"
        );
        if read_only {
            assert!(r["write_amp"].is_null(), "{r}");
        } else if cfg!(target_os = "linux") {
            // Every write reaches the value log at least once.
            let wa = r["write_amp"].as_f64().expect("Linux has /proc/self/io");
            assert!((1.0..50.0).contains(&wa), "write amplification {wa}: {r}");
        }
        if w == "readwhilewriting" {
            assert!(r["writer_ops_per_sec"].as_f64().unwrap() > 0.0, "{r}");
            assert_eq!(r["threads"].as_u64(), Some(2));
        }
    }
    for w in DB_BENCH {
        for size in [100, 4096] {
            let syncs: &[Option<bool>] = if matches!(w, "readrandom" | "readseq") {
                &[None]
            } else {
                &[Some(false), Some(true)]
            };
            for &s in syncs {
                assert!(
                    seen.contains(&(w.to_string(), size, s)),
                    "missing {w} {size} {s:?}"
                );
            }
        }
    }
    for size in [512, 8192] {
        assert!(seen.contains(&("seed000-insert".into(), size, Some(false))));
        assert!(seen.contains(&("seed000-insert".into(), size, Some(true))));
        assert!(seen.contains(&("seed000-search".into(), size, None)));
    }
    assert!(seen.contains(&("seed000-remove".into(), 512, Some(true))));
    assert_eq!(rows.len(), seen.len(), "no duplicate rows");

    // Sync on runs fewer operations, off runs what was asked.
    let num = |w: &str, s: bool| {
        rows.iter()
            .find(|r| r["workload"] == w && r["sync"] == s && r["value_bytes"] == 100)
            .and_then(|r| r["num"].as_u64())
            .unwrap()
    };
    assert_eq!(num("fillseq", false), 300);
    assert!(num("fillseq", true) < 300);

    // The stores were removed afterwards.
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);
}

#[test]
fn seed_000_group_and_selection() {
    let o = gvault(&[
        "bench",
        "lsm",
        "--json",
        "--seed-000",
        "--seed-keys",
        "100",
        "--objects",
        "2",
        "--sync",
        "off",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let names: BTreeSet<&str> = report["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["workload"].as_str().unwrap())
        .collect();
    assert_eq!(names, SEED.into_iter().collect());
}

#[test]
fn bad_input_is_refused() {
    for args in [
        &["--workloads", "fillfast"][..],
        &["--value-sizes", "8"],
        &["--value-sizes", "4Q"],
        &["--objects", "0"],
        &["--repeat", "0"],
        &["--num", "0"],
        &["--sync", "sometimes"],
        &["--encrypt", "aes"],
        &["--reencrypt", "0"],
        &["--reencrypt", "-1"],
    ] {
        let mut all = vec!["bench", "lsm", "--quick"];
        all.extend_from_slice(args);
        let o = gvault(&all);
        assert_eq!(o.status.code(), Some(2), "{args:?} should fail");
        assert!(!o.stderr.is_empty(), "{args:?} says why");
        assert!(o.stdout.is_empty(), "{args:?} fails before measuring");
    }
}

#[test]
fn encrypted_rows_carry_mode_and_ratio_and_reencrypt_is_measured() {
    let tmp = tempfile::tempdir().unwrap();
    let o = gvault(&[
        "bench",
        "lsm",
        "--json",
        "--quick",
        "--dir",
        tmp.path().to_str().unwrap(),
        "--workloads",
        "fillrandom,readrandom",
        "--num",
        "300",
        "--value-sizes",
        "100,4K",
        "--sync",
        "off",
        "--encrypt",
        "cpu,none",
        "--reencrypt",
        "0.01",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let rows = report["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 8, "2 workloads x 2 sizes x 2 modes");
    for r in rows {
        assert!(r["ops_per_sec"].as_f64().unwrap() > 0.0, "{r}");
        match r["encrypt"].as_str().unwrap() {
            "none" => assert!(r["enc_vs_plain"].is_null(), "{r}"),
            "cpu" => {
                let plain = rows
                    .iter()
                    .find(|p| {
                        p["encrypt"] == "none"
                            && p["workload"] == r["workload"]
                            && p["value_bytes"] == r["value_bytes"]
                    })
                    .unwrap();
                let want =
                    r["ops_per_sec"].as_f64().unwrap() / plain["ops_per_sec"].as_f64().unwrap();
                let got = r["enc_vs_plain"].as_f64().unwrap();
                assert!((got - want).abs() < 1e-9 * want.max(1.0), "{r}");
            }
            m => panic!("unexpected mode {m}"),
        }
    }
    let re = &report["reencrypt"];
    assert_eq!(re["encrypt"], "cpu");
    assert!(re["store_bytes"].as_u64().unwrap() >= 10 << 20, "{re}");
    assert!(re["reencrypt_mb_per_sec"].as_f64().unwrap() > 0.0, "{re}");
    assert!(re["copy_mb_per_sec"].as_f64().unwrap() > 0.0, "{re}");
    assert_eq!(re["keys_retired"], serde_json::json!([1]), "{re}");
    let ratio =
        re["reencrypt_mb_per_sec"].as_f64().unwrap() / re["copy_mb_per_sec"].as_f64().unwrap();
    assert!(
        (re["ratio_to_copy"].as_f64().unwrap() - ratio).abs() < 1e-9,
        "{re}"
    );
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);
}
