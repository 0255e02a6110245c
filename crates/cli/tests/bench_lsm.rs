//! `gvault bench lsm` through the real binary, with tiny sizes: every
//! requested workload is reported, with non-zero operations and sane
//! figures, and bad input is refused with a clear error.

use std::collections::BTreeSet;

mod common;
use common::gvault_no_store;

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
    let o = gvault_no_store(&[
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
    let o = gvault_no_store(&[
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
        &["--threads", "0"],
        &["--threads", "1,,2"],
        &["--duration", "0"],
        &["--duration", "1", "--reads", "10"],
        &["--cache-mb", "-1"],
        &["--save", "/nonexistent-dir/report.json"],
    ] {
        let mut all = vec!["bench", "lsm", "--quick"];
        all.extend_from_slice(args);
        let o = gvault_no_store(&all);
        assert_eq!(o.status.code(), Some(2), "{args:?} should fail");
        assert!(!o.stderr.is_empty(), "{args:?} says why");
        assert!(o.stdout.is_empty(), "{args:?} fails before measuring");
    }
}

#[test]
fn encrypted_rows_carry_mode_and_ratio_and_reencrypt_is_measured() {
    let tmp = tempfile::tempdir().unwrap();
    let o = gvault_no_store(&[
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

fn json_run(args: &[&str]) -> serde_json::Value {
    let o = gvault_no_store(args);
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).expect("stdout is one JSON document")
}

fn f(v: &serde_json::Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// readrandom and readseq on 1 and 2 threads: a row per workload, size,
/// thread count and mode, each with its scaling over the 1-thread row, the
/// workers' profile, and a space row per size and mode.
#[test]
fn a_thread_sweep_reports_scaling_profile_and_space() {
    let tmp = tempfile::tempdir().unwrap();
    let num = 300u64;
    let report = json_run(&[
        "bench",
        "lsm",
        "--json",
        "--dir",
        tmp.path().to_str().unwrap(),
        "--workloads",
        "readrandom,readseq",
        "--value-sizes",
        "100,4K",
        "--num",
        &num.to_string(),
        "--threads",
        "2,1",
        "--encrypt",
        "none,cpu",
        "--profile",
    ]);
    let rows = report["rows"].as_array().expect("rows");
    assert_eq!(
        rows.len(),
        16,
        "2 workloads x 2 sizes x 2 thread counts x 2 modes"
    );
    let find = |w: &str, size: u64, threads: u64, enc: &str| {
        rows.iter()
            .find(|r| {
                r["workload"] == w
                    && r["value_bytes"] == size
                    && r["threads"] == threads
                    && r["encrypt"] == enc
            })
            .unwrap_or_else(|| panic!("no row {w} {size} x{threads} {enc}"))
    };
    for w in ["readrandom", "readseq"] {
        for size in [100, 4096] {
            for enc in ["none", "cpu"] {
                let one = find(w, size, 1, enc);
                let two = find(w, size, 2, enc);
                assert_eq!(f(&one["scaling"]), 1.0, "{one}");
                let want = f(&two["ops_per_sec"]) / f(&one["ops_per_sec"]);
                assert!((f(&two["scaling"]) - want).abs() < 1e-9 * want, "{two}");
                for r in [one, two] {
                    // Count-based: the threads share num operations.
                    assert_eq!(r["ops"].as_u64(), Some(num), "{r}");
                    assert!(r["cache_bytes"].as_u64().unwrap() >= 64 << 20, "{r}");
                    let p = &r["profile"];
                    let threads = r["threads"].as_u64().unwrap() as f64;
                    let worker_secs = f(&p["wall_us_per_op"]) * num as f64 / 1e6;
                    assert!(worker_secs > 0.0, "{r}");
                    assert!(
                        worker_secs <= threads * f(&r["seconds"]) * 1.01 + 1e-3,
                        "each worker's wall time lies within the run's: {r}"
                    );
                    if cfg!(target_os = "linux") {
                        let cpu = f(&r["thread_cpu_us_per_op"]);
                        let queued = f(&r["thread_queued_us_per_op"]);
                        let blocked = f(&p["blocked_us_per_op"]);
                        assert!(cpu > 0.0 && queued >= 0.0 && blocked >= 0.0, "{r}");
                        assert!(f(&p["voluntary_switches_per_op"]) >= 0.0, "{r}");
                        assert!(f(&p["other_threads_cpu_us_per_op"]) >= 0.0, "{r}");
                    }
                }
            }
        }
    }
    let space = report["space"].as_array().expect("space rows");
    assert_eq!(space.len(), 4, "a space row per size and mode: {space:?}");
    for s in space {
        let size = s["value_bytes"].as_u64().unwrap();
        assert_eq!(s["live_bytes"].as_u64(), Some(num * (16 + size)), "{s}");
        let parts = ["disk_table_bytes", "disk_vlog_bytes", "disk_other_bytes"]
            .map(|k| s[k].as_u64().unwrap())
            .iter()
            .sum::<u64>();
        assert_eq!(s["disk_bytes"].as_u64(), Some(parts), "{s}");
        let amp = f(&s["space_amp"]);
        assert!(
            amp >= 1.0 && amp.is_finite(),
            "every live byte is on disk: {s}"
        );
        assert!(
            (amp - parts as f64 / (num * (16 + size)) as f64).abs() < 1e-9,
            "{s}"
        );
        assert!(s["version_table_bytes"].as_u64().unwrap() > 0, "{s}");
        let reopened = s["reopened_bytes"].as_u64().unwrap();
        assert!(reopened >= num * (16 + size), "{s}");
        assert!(
            s["cache_used_bytes"].as_u64().unwrap() > 0,
            "the warm-up filled the cache: {s}"
        );
    }
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);
}

/// With --duration every thread reads until the time is up: readseq scans
/// its range again and again, so both run more operations than entries.
#[test]
fn duration_runs_read_until_the_time_is_up() {
    let tmp = tempfile::tempdir().unwrap();
    let report = json_run(&[
        "bench",
        "lsm",
        "--json",
        "--dir",
        tmp.path().to_str().unwrap(),
        "--workloads",
        "readrandom,readseq",
        "--value-sizes",
        "100",
        "--num",
        "200",
        "--threads",
        "1,2",
        "--duration",
        "0.2",
        "--cache-mb",
        "1",
    ]);
    let rows = report["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 4);
    for r in rows {
        assert!(f(&r["seconds"]) >= 0.2, "{r}");
        assert!(r["ops"].as_u64().unwrap() > 200, "{r}");
        assert_eq!(r["cache_bytes"].as_u64(), Some(1 << 20), "{r}");
        assert!(r["scaling"].as_f64().is_some(), "{r}");
        assert!(r["profile"].is_null(), "no --profile: {r}");
    }
}

#[test]
fn the_table_shows_threads_scaling_profile_and_space() {
    let tmp = tempfile::tempdir().unwrap();
    let saved = tempfile::tempdir().unwrap();
    let json = saved.path().join("report.json");
    let o = gvault_no_store(&[
        "bench",
        "lsm",
        "--dir",
        tmp.path().to_str().unwrap(),
        "--save",
        json.to_str().unwrap(),
        "--workloads",
        "readseq",
        "--value-sizes",
        "100",
        "--num",
        "200",
        "--threads",
        "1,2",
        "--profile",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout);
    let header = out
        .lines()
        .find(|l| l.starts_with("workload"))
        .expect("a header");
    for col in ["thr", "scaling", "blocked", "vcsw/op"] {
        assert!(header.contains(col), "{col}: {header}");
    }
    let rows: Vec<&str> = out.lines().filter(|l| l.starts_with("readseq")).collect();
    assert_eq!(rows.len(), 2, "{out}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("space") && l.contains("space_amp")),
        "{out}"
    );
    // --save wrote the same run as JSON beside the table.
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).expect("--save wrote its file")).unwrap();
    assert_eq!(report["rows"].as_array().map(Vec::len), Some(2));
    assert_eq!(report["space"].as_array().map(Vec::len), Some(1));
}
