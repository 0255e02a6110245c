//! The command line a user lives with: closed pipes, JSON output, export
//! and import of binary records, value encodings, completions, progress
//! only on a terminal, a master key in the environment meeting a plain
//! store, and bad benchmark sizes.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use rand::{Rng, SeedableRng};

mod common;
use common::{code, command, gvault, gvault_stdin, output, stderr};

fn ok(o: Output) -> Vec<u8> {
    assert_eq!(code(&o), 0, "{o:?}");
    o.stdout
}

fn ok_text(o: Output) -> String {
    String::from_utf8(ok(o)).unwrap()
}

/// A plain store in `dir` with a few records, one of them binary.
fn plain_store(dir: &Path) {
    ok(gvault(dir, &["init"]));
    for (k, v) in [("a", "alpha"), ("b", "beta"), ("c", "gamma")] {
        ok(gvault(dir, &["put", k, v]));
    }
    ok(gvault_stdin(dir, &["put", "bin"], &[0, 0xff, 0x10]));
}

#[test]
fn a_closed_stdout_ends_every_printing_command_quietly() {
    let tmp = tempfile::tempdir().unwrap();
    let plain = tmp.path().join("plain");
    plain_store(&plain);
    let vault = tmp.path().join("vault");
    ok(gvault(&vault, &["init", "--encrypt"]));
    ok(gvault(&vault, &["put", "k", "v"]));
    let records = tmp.path().join("records.jsonl");
    std::fs::write(&records, "{\"key\": \"x\", \"value\": \"y\"}\n").unwrap();
    let demo_tmp = tmp.path().join("demo-tmp");
    std::fs::create_dir(&demo_tmp).unwrap();

    let cases: Vec<(&Path, Vec<&str>)> = vec![
        (&plain, vec!["doctor"]),
        (&plain, vec!["stats"]),
        (&plain, vec!["stats", "--json"]),
        (&plain, vec!["verify"]),
        (&plain, vec!["verify", "--json"]),
        (&plain, vec!["scan"]),
        (&plain, vec!["scan", "--json"]),
        (&plain, vec!["get", "a"]),
        (&plain, vec!["get", "a", "--json"]),
        (&plain, vec!["get", "bin", "--hex"]),
        (&plain, vec!["export"]),
        (&plain, vec!["gc"]),
        (&plain, vec!["import", records.to_str().unwrap()]),
        (&vault, vec!["keys", "status"]),
        (&vault, vec!["keys", "status", "--json"]),
        (&vault, vec!["keys", "rotate"]),
        (&plain, vec!["completions", "bash"]),
        (
            &plain,
            vec![
                "bench",
                "primitive",
                "--ops",
                "crc32c",
                "--sizes",
                "4K",
                "--total",
                "64K",
                "--min-ms",
                "1",
                "--backend",
                "cpu",
            ],
        ),
        (&plain, vec!["demo", "--mb", "1"]),
    ];
    for (store, args) in cases {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let mut c = command(store, &args);
        c.stdout(Stdio::from(writer)).env("TMPDIR", &demo_tmp);
        let o = output(c);
        let err = stderr(&o);
        assert!(
            !err.contains("panicked") && err.is_empty(),
            "gvault {args:?}: {err}"
        );
        assert_eq!(o.status.code(), Some(141), "gvault {args:?}: {o:?}");
    }
    // Destructors ran on the way out: the demo removed its temporary store.
    let left: Vec<_> = std::fs::read_dir(&demo_tmp).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
    // ... and the stores are intact.
    assert_eq!(ok(gvault(&plain, &["get", "x"])), b"y");
    assert_eq!(ok(gvault(&vault, &["get", "k"])), b"v");
}

#[test]
fn a_closed_stdout_on_a_long_output_stops_the_command() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("s");
    ok(gvault(&d, &["init"]));
    let lines: String = (0..20_000)
        .map(|i| {
            format!(
                "{{\"key\": \"k{i:06}\", \"value\": \"{}\"}}\n",
                "v".repeat(100)
            )
        })
        .collect();
    ok(gvault_stdin(&d, &["import"], lines.as_bytes()));
    // The reader takes one line and goes away mid-stream.
    for args in [&["scan"][..], &["export"], &["scan", "--json"]] {
        let mut child = command(&d, args).spawn().unwrap();
        let mut out = child.stdout.take().unwrap();
        let mut first = [0u8; 64];
        out.read_exact(&mut first).unwrap();
        drop(out);
        let o = child.wait_with_output().unwrap();
        assert_eq!(o.status.code(), Some(141), "{args:?}: {o:?}");
        assert!(o.stderr.is_empty(), "{args:?}: {}", stderr(&o));
    }
}

#[test]
fn bad_benchmark_sizes_are_errors_not_panics() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let huge = format!("{}G", (u64::MAX >> 30) + 1);
    for (args, why) in [
        (
            vec!["bench", "primitive", "--ops", "sha256", "--sizes", "0"],
            "at least 1 byte",
        ),
        (
            vec!["bench", "primitive", "--ops", "sha256", "--sizes", "4K,0K"],
            "at least 1 byte",
        ),
        (
            vec!["bench", "primitive", "--ops", "sha256", "--sizes", &huge],
            "too large",
        ),
        (
            vec!["bench", "primitive", "--ops", "sha256", "--total", "0"],
            "at least 1 byte",
        ),
        (
            vec!["bench", "seed001", "--quick", "--sizes", "0"],
            "at least 1 byte",
        ),
        (
            vec!["bench", "seed001", "--quick", "--block", "0"],
            "at least 1 byte",
        ),
    ] {
        let mut a = args.clone();
        if a[1] == "primitive" {
            a.extend(["--backend", "cpu", "--min-ms", "1"]);
        }
        let o = gvault(d, &a);
        assert_eq!(code(&o), 2, "{a:?}: {o:?}");
        let err = stderr(&o);
        assert!(
            err.contains(why) && !err.contains("panicked"),
            "{a:?}: {err}"
        );
    }
}

#[test]
fn json_output_of_stats_verify_keys_scan_and_get() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("s");
    plain_store(&d);
    let v: serde_json::Value =
        serde_json::from_slice(&ok(gvault(&d, &["stats", "--json"]))).unwrap();
    assert_eq!(v["last_sequence"], 4, "{v}");
    assert!(v["levels"].as_array().is_some_and(|l| !l.is_empty()), "{v}");

    let v: serde_json::Value =
        serde_json::from_slice(&ok(gvault(&d, &["verify", "--json"]))).unwrap();
    assert_eq!(
        (v["clean"].as_bool(), v["live_keys"].as_u64()),
        (Some(true), Some(4)),
        "{v}"
    );
    assert_eq!(v["problems"], serde_json::json!([]));

    let lines = ok_text(gvault(&d, &["scan", "--json", "--from", "b"]));
    let recs: Vec<serde_json::Value> = lines
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        recs,
        vec![
            serde_json::json!({"key": "b", "value": "beta"}),
            serde_json::json!({"key": "bin", "value_b64": B64.encode([0u8, 0xff, 0x10])}),
            serde_json::json!({"key": "c", "value": "gamma"}),
        ]
    );
    let keys = ok_text(gvault(
        &d,
        &["scan", "--json", "--keys-only", "--limit", "1"],
    ));
    assert_eq!(keys, "{\"key\":\"a\"}\n");

    let v: serde_json::Value =
        serde_json::from_slice(&ok(gvault(&d, &["get", "a", "--json"]))).unwrap();
    assert_eq!(v, serde_json::json!({"key": "a", "value": "alpha"}));
    let v: serde_json::Value =
        serde_json::from_slice(&ok(gvault(&d, &["get", "bin", "--json"]))).unwrap();
    assert_eq!(v, serde_json::json!({"key": "bin", "value_b64": "AP8Q"}));
    assert_eq!(code(&gvault(&d, &["get", "nope", "--json"])), 1);

    // Damage shows in the JSON report, with the same exit status: one
    // byte of a value, in whichever file holds it.
    let (file, mut bytes, at) = std::fs::read_dir(&d)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find_map(|p| {
            let b = std::fs::read(&p).ok()?;
            let at = b.windows(5).position(|w| w == b"gamma")?;
            Some((p, b, at))
        })
        .unwrap();
    bytes[at] ^= 1;
    std::fs::write(&file, bytes).unwrap();
    let o = gvault(&d, &["verify", "--json"]);
    assert_eq!(code(&o), 3, "{o:?}");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["clean"], false, "{v}");
    assert!(!v["problems"].as_array().unwrap().is_empty(), "{v}");

    // keys status of an encrypted store.
    let vault = tmp.path().join("vault");
    ok(gvault(&vault, &["init", "--encrypt"]));
    ok(gvault(&vault, &["put", "k", "v"]));
    ok(gvault(&vault, &["keys", "rotate"]));
    let v: serde_json::Value =
        serde_json::from_slice(&ok(gvault(&vault, &["keys", "status", "--json"]))).unwrap();
    let current = v["current"].as_u64().unwrap();
    let states: Vec<(u64, &str)> = v["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| (k["id"].as_u64().unwrap(), k["state"].as_str().unwrap()))
        .collect();
    assert!(states.contains(&(current, "current")), "{v}");
    assert!(states.iter().any(|&(_, s)| s == "old"), "{v}");
    assert!(v["stale_files"].as_u64().unwrap() > 0, "{v}");
}

/// Random records: binary and text keys and values, empty ones, and a few
/// over the store's value threshold.
fn random_records(n: usize) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(21);
    let bytes = |rng: &mut rand::rngs::StdRng, max: usize| -> Vec<u8> {
        let len = rng.gen_range(0..=max);
        match rng.gen_range(0..3) {
            0 => (0..len).map(|_| rng.gen()).collect(),
            1 => (0..len)
                .map(|_| rng.gen_range(b' '..=b'~'))
                .collect::<Vec<u8>>(),
            _ => "é\n\t\"\\\u{0}☃".repeat(len / 8 + 1).into_bytes(),
        }
    };
    let mut out = BTreeMap::new();
    out.insert(Vec::new(), b"empty key".to_vec());
    out.insert(b"\xff\xfe".to_vec(), Vec::new());
    while out.len() < n {
        let k = bytes(&mut rng, 40);
        let max = if out.len() % 50 == 0 { 200_000 } else { 3000 };
        let v = bytes(&mut rng, max);
        out.insert(k, v);
    }
    out
}

fn parse_export(text: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
    text.lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            let field = |name: &str| -> Vec<u8> {
                match (v.get(name), v.get(format!("{name}_b64"))) {
                    (Some(s), None) => s.as_str().unwrap().as_bytes().to_vec(),
                    (None, Some(b)) => {
                        let raw = B64.decode(b.as_str().unwrap()).unwrap();
                        // base64 only for bytes that are not UTF-8.
                        assert!(std::str::from_utf8(&raw).is_err(), "{l}");
                        raw
                    }
                    _ => panic!("bad record {l}"),
                }
            };
            (field("key"), field("value"))
        })
        .collect()
}

#[test]
fn export_then_import_round_trips_binary_records_exactly() {
    let tmp = tempfile::tempdir().unwrap();
    let a = tmp.path().join("a");
    ok(gvault(&a, &["init"]));
    let records = random_records(400);
    // Into the first store as base64 records, the form for any bytes.
    let input: String = records
        .iter()
        .map(|(k, v)| {
            format!(
                "{{\"key_b64\": \"{}\", \"value_b64\": \"{}\"}}\n",
                B64.encode(k),
                B64.encode(v)
            )
        })
        .collect();
    let o = gvault_stdin(&a, &["import"], input.as_bytes());
    assert_eq!(ok_text(o), format!("imported {} records\n", records.len()));

    let exported = ok_text(gvault(&a, &["export"]));
    let expected: Vec<(Vec<u8>, Vec<u8>)> = records.clone().into_iter().collect();
    assert_eq!(parse_export(&exported), expected);

    // A fresh store, from a file, reads it back exactly.
    let b = tmp.path().join("b");
    ok(gvault(&b, &["init"]));
    let dump = tmp.path().join("dump.jsonl");
    std::fs::write(&dump, &exported).unwrap();
    let o = gvault(&b, &["import", dump.to_str().unwrap()]);
    assert_eq!(ok_text(o), format!("imported {} records\n", records.len()));
    assert_eq!(ok_text(gvault(&b, &["export"])), exported);
    for (k, v) in records
        .iter()
        .filter(|(k, _)| std::str::from_utf8(k).is_ok())
        .take(20)
    {
        let key = std::str::from_utf8(k).unwrap();
        // Not every key can be an argument.
        if key.starts_with('-') || key.contains('\0') {
            continue;
        }
        assert_eq!(&ok(gvault(&b, &["get", "--", key])), v);
        let got = ok_text(gvault(&b, &["get", "--base64", "--", key]));
        assert_eq!(got, format!("{}\n", B64.encode(v)));
    }

    // A range: [from, to) of the export.
    let (from, to) = ("A", "m");
    let part = ok_text(gvault(&b, &["export", "--from", from, "--to", to]));
    let want: Vec<_> = expected
        .iter()
        .filter(|(k, _)| k.as_slice() >= from.as_bytes() && k.as_slice() < to.as_bytes())
        .cloned()
        .collect();
    assert!(!want.is_empty());
    assert_eq!(parse_export(&part), want);
    assert_eq!(
        code(&gvault(&b, &["export", "--from", "m", "--to", "A"])),
        2
    );
}

#[test]
fn put_and_get_in_hex_and_base64() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("s");
    ok(gvault(&d, &["init"]));
    ok(gvault(&d, &["put", "h", "--hex", "00 01 fe ff"]));
    assert_eq!(ok(gvault(&d, &["get", "h"])), [0u8, 1, 0xfe, 0xff]);
    assert_eq!(ok_text(gvault(&d, &["get", "h", "--hex"])), "0001feff\n");
    // From stdin with a trailing newline, as `echo` or `base64` writes it.
    ok(gvault_stdin(&d, &["put", "b", "--base64"], b"AAH+\n/w==\n"));
    assert_eq!(ok(gvault(&d, &["get", "b"])), [0u8, 1, 0xfe, 0xff]);
    assert_eq!(ok_text(gvault(&d, &["get", "b", "--base64"])), "AAH+/w==\n");
    let f = tmp.path().join("v.hex");
    std::fs::write(&f, "6869\n").unwrap();
    ok(gvault(
        &d,
        &["put", "f", "--hex", "--file", f.to_str().unwrap()],
    ));
    assert_eq!(ok(gvault(&d, &["get", "f"])), b"hi");

    let o = gvault(&d, &["put", "x", "--hex", "0g"]);
    assert_eq!(code(&o), 2, "{o:?}");
    assert!(stderr(&o).contains("--hex"), "{o:?}");
    assert_eq!(code(&gvault(&d, &["get", "x"])), 1, "nothing was written");
    assert_eq!(
        code(&gvault(&d, &["put", "x", "--hex", "--base64", "00"])),
        2
    );
    // Hex of more than 1 GiB of value is refused before it is read (the
    // file is sparse: nothing of it is written or read here).
    let huge = tmp.path().join("huge.hex");
    std::fs::File::create(&huge)
        .unwrap()
        .set_len((2 << 30) + (1 << 26) + 1)
        .unwrap();
    let o = gvault(&d, &["put", "x", "--hex", "--file", huge.to_str().unwrap()]);
    assert_eq!(code(&o), 2, "{o:?}");
    assert!(stderr(&o).contains("too long for the --hex form"), "{o:?}");
    assert_eq!(code(&gvault(&d, &["get", "h", "--hex", "--json"])), 2);
}

#[test]
fn completions_for_each_shell() {
    let d = Path::new("/nonexistent");
    for (shell, marker) in [
        ("bash", "complete -F"),
        ("zsh", "#compdef gvault"),
        ("fish", "complete -c gvault"),
    ] {
        let text = ok_text(gvault(d, &["completions", shell]));
        assert!(text.contains(marker), "{shell}: {text:.200}");
        assert!(
            text.contains("export") && text.contains("reencrypt"),
            "{shell}"
        );
    }
    assert_eq!(code(&gvault(d, &["completions", "tcsh"])), 2);
}

#[test]
fn a_key_in_the_environment_is_ignored_for_a_plain_store() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("plain");
    ok(gvault(&d, &["init"]));
    let key_file = tmp.path().join("other.key");
    std::fs::write(&key_file, format!("{}\n", "ab".repeat(32))).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let kf = key_file.to_str().unwrap();
    let hex = "cd".repeat(32);
    for (var, value) in [
        ("GVAULT_KEY", hex.as_str()),
        ("GVAULT_KEY_FILE", kf),
        ("GVAULT_PASSPHRASE", "hunter2"),
    ] {
        let with = |args: &[&str]| {
            let mut c = command(&d, args);
            c.env(var, value);
            output(c)
        };
        let o = with(&["put", "k", var]);
        assert_eq!(code(&o), 0, "{var}: {o:?}");
        let err = stderr(&o);
        assert_eq!(err.lines().count(), 1, "{var}: {err}");
        assert!(err.contains("warning") && err.contains(var), "{var}: {err}");
        let o = with(&["get", "k"]);
        assert_eq!(
            (code(&o), o.stdout.as_slice()),
            (0, var.as_bytes()),
            "{o:?}"
        );
        // Creating a plain store with a key at hand is still refused: the
        // user may have meant --encrypt.
        let o = with(&["init", "--store", tmp.path().join(var).to_str().unwrap()]);
        assert_eq!(code(&o), 2, "{o:?}");
        assert!(stderr(&o).contains(var), "{o:?}");
    }
    // A key named by a flag is still an error for a plain store.
    let o = gvault(&d, &["get", "--key-file", kf, "k"]);
    assert_eq!(code(&o), 2, "{o:?}");
    assert!(stderr(&o).contains("not encrypted"), "{o:?}");

    // An encrypted store still takes its key from the environment.
    let vault = tmp.path().join("vault");
    let mut c = command(&vault, &["init", "--encrypt"]);
    c.env("GVAULT_KEY", &hex);
    ok(output(c));
    let mut c = command(&vault, &["put", "k", "sealed"]);
    c.env("GVAULT_KEY", &hex);
    let o = output(c);
    assert_eq!(code(&o), 0, "{o:?}");
    assert!(o.stderr.is_empty(), "{o:?}");
    let mut c = command(&vault, &["get", "k"]);
    c.env("GVAULT_KEY", "ef".repeat(32));
    assert_eq!(code(&output(c)), 2, "a wrong key is not ignored");
}

/// A pseudo-terminal: the master side to read what the child draws, and
/// the slave side to hand it as stderr.
#[cfg(target_os = "linux")]
fn pty() -> (std::fs::File, std::fs::File) {
    use std::os::fd::FromRawFd;
    // SAFETY: plain libc calls on a descriptor this function owns; the
    // name buffer outlives ptsname_r, which NUL-terminates it on success.
    unsafe {
        let master = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY);
        assert!(master >= 0, "posix_openpt");
        assert_eq!(libc::grantpt(master), 0);
        assert_eq!(libc::unlockpt(master), 0);
        let mut name = [0 as libc::c_char; 128];
        assert_eq!(libc::ptsname_r(master, name.as_mut_ptr(), name.len()), 0);
        let path = std::ffi::CStr::from_ptr(name.as_ptr())
            .to_str()
            .unwrap()
            .to_string();
        let master = std::fs::File::from_raw_fd(master);
        let slave = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .unwrap();
        (master, slave)
    }
}

/// Runs with stderr on a terminal; returns the output and what the
/// terminal showed.
#[cfg(target_os = "linux")]
fn run_on_tty(mut c: Command) -> (Output, String) {
    let (mut master, slave) = pty();
    c.stderr(Stdio::from(slave));
    let child = c.spawn().unwrap();
    drop(c); // the parent's copy of the slave side
    let reader = std::thread::spawn(move || {
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        // Ends with EIO once the child (every holder of the slave) exits.
        while let Ok(n) = master.read(&mut buf) {
            if n == 0 {
                break;
            }
            seen.extend_from_slice(&buf[..n]);
        }
        String::from_utf8_lossy(&seen).into_owned()
    });
    let o = child.wait_with_output().unwrap();
    (o, reader.join().unwrap())
}

#[cfg(target_os = "linux")]
#[test]
fn progress_shows_on_a_terminal_only() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("s");
    ok(gvault(&d, &["init"]));
    let lines: String = (0..2000)
        .map(|i| {
            format!(
                "{{\"key\": \"k{i:05}\", \"value\": \"{}\"}}\n",
                "v".repeat(500)
            )
        })
        .collect();
    let f = tmp.path().join("in.jsonl");
    std::fs::write(&f, &lines).unwrap();

    // On a terminal: the bar, with the input's size known.
    let (o, tty) = run_on_tty(command(&d, &["import", f.to_str().unwrap()]));
    assert_eq!(ok_text(o), "imported 2000 records\n");
    assert!(tty.contains("importing") && tty.contains("MiB"), "{tty:?}");
    // Piped: nothing but the result.
    let o = gvault(&d, &["import", f.to_str().unwrap()]);
    assert!(o.stderr.is_empty(), "{o:?}");
    assert_eq!(ok_text(o), "imported 2000 records\n");

    let (o, tty) = run_on_tty(command(&d, &["verify"]));
    assert!(ok_text(o).contains("no problems"));
    assert!(tty.contains("verifying"), "{tty:?}");
    let o = gvault(&d, &["verify"]);
    assert!(o.stderr.is_empty(), "{o:?}");

    let (o, tty) = run_on_tty(command(&d, &["gc"]));
    assert!(ok_text(o).contains("scanned"));
    assert!(tty.contains("value-log"), "{tty:?}");

    // keys reencrypt: its progress line is for a terminal too.
    let vault = tmp.path().join("vault");
    ok(gvault(&vault, &["init", "--encrypt"]));
    ok(gvault(&vault, &["put", "k", "v"]));
    ok(gvault(&vault, &["keys", "rotate"]));
    let o = gvault(&vault, &["keys", "reencrypt", "--rate", "0"]);
    assert!(o.stderr.is_empty(), "{}", stderr(&o));
    assert!(ok_text(o).contains("rewrote"));
    ok(gvault(&vault, &["keys", "rotate"]));
    let (o, tty) = run_on_tty(command(&vault, &["keys", "reencrypt", "--rate", "0"]));
    assert!(ok_text(o).contains("rewrote"));
    assert!(tty.contains("re-encrypting"), "{tty:?}");
}
