//! `gvault bench cas` through the real binary, small: every configuration
//! restores its data bit for bit (the bench checks it and fails otherwise),
//! content-defined chunks find the similar version's shared bytes where
//! fixed blocks cannot, the CA-Infinite oracle serves every chunk job it
//! recorded, and `--plot` writes a PNG.

mod common;
use common::gvault_no_store;

#[test]
fn bench_cas_reports_every_configuration_and_the_seed_001_contrast() {
    let d = tempfile::tempdir().unwrap();
    let json = d.path().join("cas.json");
    let png = d.path().join("cas.png");
    let dir = d.path().to_str().unwrap();
    let o = gvault_no_store(&[
        "bench",
        "cas",
        "--workloads",
        "similar,checkpoint",
        "--size",
        "24M",
        "--backends",
        "cpu,oracle",
        "--chunkers",
        "cdc,fixed",
        "--data-dir",
        dir,
        "--repo-dir",
        dir,
        "--save",
        json.to_str().unwrap(),
        "--plot",
        png.to_str().unwrap(),
    ]);
    let out = String::from_utf8_lossy(&o.stdout).to_string() + &String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{out}");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 8, "{out}");
    let share = |w: &str, c: &str, b: &str| {
        rows.iter()
            .find(|r| r["workload"] == w && r["chunker"] == c && r["backend"] == b)
            .map(|r| r["new_share_v2"].as_f64().unwrap())
            .unwrap()
    };
    // One small edit per 16 MiB: CDC re-synchronises, fixed blocks shift.
    assert!(share("similar", "cdc", "cpu") < 0.3, "{out}");
    assert!(share("similar", "fixed", "cpu") > 0.5, "{out}");
    // A tenth of the tensors change: neither everything nor nothing is new.
    let c = share("checkpoint", "cdc", "cpu");
    assert!(c > 0.0 && c < 0.9, "{out}");
    for r in rows {
        assert!(r["backup1_gbps"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["restore_gbps"].as_f64().unwrap() > 0.0, "{r}");
        if r["backend"] == "oracle" {
            assert_eq!(r["oracle_missed"], 0, "{r}");
            assert!(r["oracle_served"].as_u64().unwrap() > 0, "{r}");
        }
    }
    let png = std::fs::read(&png).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    // Nothing is left behind in the directories it used.
    let left: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n.to_string_lossy().starts_with("gvault-bench"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn bench_cas_rejects_unknown_names() {
    for (flag, v) in [
        ("--workloads", "nope"),
        ("--backends", "gpu2"),
        ("--chunkers", "rabin"),
    ] {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().to_str().unwrap();
        let o = gvault_no_store(&[
            "bench",
            "cas",
            flag,
            v,
            "--size",
            "1M",
            "--data-dir",
            dir,
            "--repo-dir",
            dir,
        ]);
        assert!(!o.status.success());
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(v), "{err}");
    }
}
