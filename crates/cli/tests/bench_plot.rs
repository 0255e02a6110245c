//! `gvault bench plot` and `bench primitive --plot` through the real binary:
//! a decodable PNG of the documented size (640x440 per op panel, 3 panels a
//! row, a 48-pixel title strip), with a line in each measured column's
//! colour, and clear errors for bad input.

use std::path::Path;
use std::process::Output;

mod common;
use common::{gvault_no_store, text};

/// `gvault bench primitive` on the CPU backend at 4 and 64 KiB, quickly.
fn primitive_on_cpu(extra: &[&str]) -> Output {
    let mut args = vec![
        "bench",
        "primitive",
        "--sizes",
        "4K,64K",
        "--min-ms",
        "5",
        "--backend",
        "cpu",
    ];
    args.extend_from_slice(extra);
    gvault_no_store(&args)
}

/// `gvault bench plot --from F... --out OUT`.
fn plot(from: &[&Path], out: &Path) -> Output {
    let mut args = vec!["bench", "plot"];
    for f in from {
        args.extend(["--from", f.to_str().unwrap()]);
    }
    args.extend(["--out", out.to_str().unwrap()]);
    gvault_no_store(&args)
}

/// Colours of the columns, as plot.rs draws them.
const CPU_1: [u8; 3] = [31, 119, 180];
const CPU_ALL: [u8; 3] = [44, 160, 44];
const GPU: [u8; 3] = [214, 39, 40];
const GPU_PINNED: [u8; 3] = [148, 103, 189];
const GPU_KERNEL: [u8; 3] = [255, 127, 14];

fn decode(path: &Path) -> image::RgbImage {
    image::open(path)
        .unwrap_or_else(|e| panic!("{} is not a readable image: {e}", path.display()))
        .to_rgb8()
}

fn pixels_of(img: &image::RgbImage, rgb: [u8; 3]) -> usize {
    img.pixels().filter(|p| p.0 == rgb).count()
}

/// Two ops, three sizes, every GPU column; one rate JSON wrote as null,
/// and an RSA row (ops/s by key size), which is not plotted.
const FIXTURE: &str = r#"{
  "threads": 16,
  "rows": [
    {"op": "crc32c", "segment_bytes": 4096, "segments": 8192,
     "results": {"cpu-1": 4.1, "cpu-all": 20.5, "gpu": 2.2, "gpu-pinned": 3.0, "gpu-kernel": 90.0}},
    {"op": "crc32c", "segment_bytes": 65536, "segments": 512,
     "results": {"cpu-1": 8.0, "cpu-all": 60.0, "gpu": 9.5, "gpu-pinned": 14.0, "gpu-kernel": 400.0}},
    {"op": "crc32c", "segment_bytes": 1048576, "segments": 32,
     "results": {"cpu-1": 8.1, "cpu-all": 61.0, "gpu": 20.0, "gpu-pinned": 40.0, "gpu-kernel": null}},
    {"op": "aes256ctr", "segment_bytes": 4096, "segments": 8192,
     "results": {"cpu-1": 1.5, "cpu-all": 11.0, "gpu": 1.1, "gpu-pinned": 1.6, "gpu-kernel": 30.0}},
    {"op": "aes256ctr", "segment_bytes": 1048576, "segments": 32,
     "results": {"cpu-1": 2.7, "cpu-all": 21.0, "gpu": 12.0, "gpu-pinned": 25.0, "gpu-kernel": 310.0}},
    {"op": "rsa-private", "segment_bytes": 256, "segments": 128,
     "results": {"cpu-1": 1200.0, "cpu-all": 9000.0}}
  ],
  "reference": {}
}"#;

#[test]
fn plot_from_saved_json_draws_every_column() {
    let tmp = tempfile::tempdir().unwrap();
    let json = tmp.path().join("results.json");
    // A log line before the JSON, as when stdout and stderr were saved together.
    std::fs::write(&json, format!("gpu: 1 device\n{FIXTURE}\n")).unwrap();
    let png = tmp.path().join("out.png");
    let o = plot(&[&json], &png);
    assert!(o.status.success(), "{}", text(&o));
    let img = decode(&png);
    assert_eq!(
        img.dimensions(),
        (2 * 640, 48 + 440),
        "two op panels in one row"
    );
    for (name, rgb) in [
        ("cpu-1", CPU_1),
        ("cpu-all", CPU_ALL),
        ("gpu", GPU),
        ("gpu-pinned", GPU_PINNED),
        ("gpu-kernel", GPU_KERNEL),
    ] {
        // Lines across two panels, not just the two legend swatches.
        let n = pixels_of(&img, rgb);
        assert!(n > 400, "{name}: only {n} pixels of its colour");
    }
}

#[test]
fn plot_refuses_bad_input_clearly() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let out = dir.join("out.png");
    let out = out.to_str().unwrap();
    let cases: [(&str, &str, &str); 4] = [
        ("missing.json", "", "cannot read"),
        ("notjson.txt", "hello\n", "no JSON object"),
        (
            "wrong.json",
            "{\"rows\": 3}",
            "not a `bench primitive --json` report",
        ),
        (
            "rsa.json",
            r#"{"rows": [{"op": "rsa-private", "segment_bytes": 256, "results": {"cpu-1": 5.0}}]}"#,
            "nothing to plot",
        ),
    ];
    for (name, content, expect) in cases {
        let path = dir.join(name);
        if !content.is_empty() {
            std::fs::write(&path, content).unwrap();
        }
        let o = plot(&[&path], Path::new(out));
        assert!(!o.status.success(), "{name} was accepted");
        assert!(text(&o).contains(expect), "{name}: {}", text(&o));
        assert!(!text(&o).contains("panicked"), "{name}: {}", text(&o));
    }
    let json = dir.join("ok.json");
    std::fs::write(&json, FIXTURE).unwrap();
    let bad_out = dir.join("out.jpg");
    let o = plot(&[&json], &bad_out);
    assert!(
        !o.status.success() && text(&o).contains("*.png"),
        "{}",
        text(&o)
    );
    let no_dir = dir.join("no/such/dir/out.png");
    let o = plot(&[&json], &no_dir);
    assert!(
        !o.status.success() && text(&o).contains("cannot draw"),
        "{}",
        text(&o)
    );
}

#[test]
fn primitive_run_draws_its_figure() {
    let tmp = tempfile::tempdir().unwrap();
    let png = tmp.path().join("crc.png");
    let run = |extra: &[&str]| {
        let mut args = vec![
            "--quick",
            "--ops",
            "crc32c",
            "--plot",
            png.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let o = primitive_on_cpu(&args);
        assert!(o.status.success(), "{}", text(&o));
        o
    };
    run(&[]);
    let img = decode(&png);
    assert_eq!(img.dimensions(), (640, 48 + 440));
    assert!(pixels_of(&img, CPU_1) > 200 && pixels_of(&img, CPU_ALL) > 200);

    // Without the 1-core column: "-" in the table, no line in the figure.
    let o = run(&["--no-single-core"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(!out.to_lowercase().contains("nan"), "{out}");
    let row = out
        .lines()
        .find(|l| l.starts_with("crc32c") && l.contains("4KiB"))
        .unwrap_or_else(|| panic!("no 4KiB row:\n{out}"));
    let cells: Vec<&str> = row.split_whitespace().collect();
    // op, segment, count, cpu-1, cpu-all, scaling, ...
    assert_eq!((cells[3], cells[5]), ("-", "-"), "{row}");
    assert!(cells[4].parse::<f64>().unwrap() > 0.0, "{row}");
    let img = decode(&png);
    assert_eq!(pixels_of(&img, CPU_1), 0, "a skipped column was drawn");
    assert!(pixels_of(&img, CPU_ALL) > 200);
}

/// Two runs saved apart (`bench primitive --save`), one figure: the saved
/// report keeps the table on stdout, and `--from` twice draws both runs'
/// ops, as the GPU host's auto sweep does for GCM and BLAKE3 beside SHA-256.
#[test]
fn one_figure_from_two_saved_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let save = |op: &str| {
        let json = tmp.path().join(format!("{op}.json"));
        let o = primitive_on_cpu(&["--ops", op, "--save", json.to_str().unwrap()]);
        assert!(o.status.success(), "{}", text(&o));
        let table = String::from_utf8_lossy(&o.stdout);
        assert!(
            table
                .lines()
                .any(|l| l.starts_with(op) && l.contains("64KiB")),
            "the table still prints:\n{table}"
        );
        json
    };
    let (a, b) = (save("crc32c"), save("sha256"));
    let png = tmp.path().join("both.png");
    let o = plot(&[&a, &b], &png);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        decode(&png).dimensions(),
        (2 * 640, 48 + 440),
        "two op panels"
    );
    let o = gvault_no_store(&[
        "bench",
        "primitive",
        "--ops",
        "crc32c",
        "--sizes",
        "4K",
        "--save",
        tmp.path().join("no/dir/x.json").to_str().unwrap(),
    ]);
    assert!(
        !o.status.success() && text(&o).contains("--save"),
        "{}",
        text(&o)
    );
}
