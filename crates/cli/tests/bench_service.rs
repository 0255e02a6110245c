//! `gvault bench service` through the real binary, small: the bench starts
//! its two daemons (`serve`, with and without batching), reports every
//! cell with positive figures for all three modes, stops the daemons, and
//! `--plot` writes a decodable PNG with a line per mode. The GPU-bound ops
//! (fastcdc-blake3, rsa-private) run too, on the CPU.

use std::path::Path;
use std::process::Output;

mod common;
use common::{gvault_no_store, text};

/// `gvault bench service` on the CPU backend, one op, 1 and 2 clients.
fn bench(extra: &[&str]) -> Output {
    let mut args = vec![
        "bench",
        "service",
        "--quick",
        "--clients",
        "1,2",
        "--ops",
        "sha256",
        "--min-ms",
        "20",
        "--repeat",
        "1",
        "--accel",
        "cpu",
    ];
    args.extend_from_slice(extra);
    gvault_no_store(&args)
}

const MODES: [&str; 3] = ["in-process", "service", "service-nobatch"];

#[test]
fn json_has_every_cell_and_mode() {
    let o = bench(&["--sizes", "4K", "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {}", text(&o)));
    let cells = v["cells"].as_array().expect("cells");
    assert_eq!(cells.len(), 2, "{v}");
    for (cell, clients) in cells.iter().zip([1, 2]) {
        assert_eq!(cell["op"], "sha256", "{cell}");
        assert_eq!(cell["request_bytes"], 4096, "{cell}");
        assert_eq!(cell["clients"], clients, "{cell}");
        for mode in MODES {
            let r = &cell["results"][mode];
            for figure in ["gbps", "requests_per_s"] {
                let x = r[figure].as_f64().unwrap_or(0.0);
                assert!(x > 0.0, "{mode} {figure}: {cell}");
            }
        }
        assert!(cell["overhead"].as_f64().is_some(), "{cell}");
        assert!(cell["batching_gain"].as_f64().unwrap() > 0.0, "{cell}");
    }
    // The targets are listed, none covered by so small a run.
    let targets = v["targets"].as_array().expect("targets");
    assert_eq!(targets.len(), 3, "{v}");
    assert!(targets.iter().all(|t| t["covered"] == false), "{v}");
}

#[test]
fn gpu_bound_ops_are_checked_and_measured() {
    let o = gvault_no_store(&[
        "bench",
        "service",
        "--ops",
        "fastcdc-blake3,rsa-private",
        "--sizes",
        "64K",
        "--clients",
        "1,2",
        "--accel",
        "cpu",
        "--min-ms",
        "20",
        "--repeat",
        "1",
        "--json",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {}", text(&o)));
    let cells = v["cells"].as_array().expect("cells");
    assert_eq!(cells.len(), 4, "two ops x two client counts: {v}");
    for (cell, (op, clients)) in cells.iter().zip([
        ("fastcdc-blake3", 1),
        ("fastcdc-blake3", 2),
        ("rsa-private", 1),
        ("rsa-private", 2),
    ]) {
        assert_eq!(cell["op"], op, "{cell}");
        assert_eq!(cell["request_bytes"], 65536, "{cell}");
        assert_eq!(cell["clients"], clients, "{cell}");
        let rsa = op == "rsa-private";
        // 64 KiB of RSA-2048 is 256 messages a request.
        let messages = cell["messages_per_request"].as_u64();
        assert_eq!(messages, rsa.then_some(256), "{cell}");
        for mode in MODES {
            let r = &cell["results"][mode];
            for figure in ["gbps", "requests_per_s"] {
                let x = r[figure].as_f64().unwrap_or(0.0);
                assert!(x > 0.0, "{mode} {figure}: {cell}");
            }
            let ops = r["ops_per_s"].as_f64();
            assert_eq!(ops.is_some(), rsa, "{mode} ops_per_s: {cell}");
            if let Some(ops) = ops {
                let want = r["requests_per_s"].as_f64().unwrap() * 256.0;
                assert!((ops - want).abs() <= 1e-6 * want, "{mode}: {cell}");
            }
        }
        assert!(cell["batching_gain"].as_f64().unwrap() > 0.0, "{cell}");
    }
}

fn decode(path: &Path) -> image::RgbImage {
    image::open(path)
        .unwrap_or_else(|e| panic!("{} is not a readable image: {e}", path.display()))
        .to_rgb8()
}

#[test]
fn plot_draws_a_line_per_mode_and_the_table_prints() {
    let tmp = tempfile::tempdir().unwrap();
    let png = tmp.path().join("service.png");
    let o = bench(&["--sizes", "4K,64K", "--plot", png.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    let rows = out
        .lines()
        .filter(|l| l.starts_with("sha256") && l.split_whitespace().count() == 10)
        .count();
    assert_eq!(rows, 4, "two sizes x two client counts:\n{out}");
    assert!(out.contains("issue 23 targets"), "{out}");
    let img = decode(&png);
    // One row of panels (one op), one panel per client count.
    assert_eq!(img.dimensions(), (2 * 560, 48 + 420));
    for (mode, rgb) in MODES
        .iter()
        .zip([[31, 119, 180], [214, 39, 40], [255, 127, 14]])
    {
        let n = img.pixels().filter(|p| p.0 == rgb).count();
        assert!(n > 100, "{mode}: only {n} pixels of its colour");
    }
}

#[test]
fn refuses_bad_arguments_before_starting_daemons() {
    for (args, expect) in [
        (&["--ops", "aes256gcm-open"][..], "unknown op"),
        (&["--clients", "0"][..], "--clients"),
        (&["--plot", "x.jpg"][..], "*.png"),
    ] {
        let o = bench(args);
        assert!(!o.status.success(), "{args:?} was accepted");
        assert!(text(&o).contains(expect), "{args:?}: {}", text(&o));
    }
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("none.sock");
    let o = bench(&["--socket", missing.to_str().unwrap()]);
    assert!(!o.status.success());
    assert!(
        text(&o).contains("no gvault service answers"),
        "{}",
        text(&o)
    );
}
