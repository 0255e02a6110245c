//! The `gvault repo` commands: a backup restored bit for bit, JSON output,
//! and the exit codes for damage, skipped files, wrong keys and a newer
//! format.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn run(repo: &Path, args: &[&str], env: &[(&str, &str)], stdin: Option<&[u8]>) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_gvault"));
    cmd.arg("repo")
        .args(args)
        .env("GVAULT_REPO", repo)
        .env("GVAULT_CPU_THREADS", "2")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for v in ["GVAULT_KEY", "GVAULT_KEY_FILE", "GVAULT_PASSPHRASE"] {
        cmd.env_remove(v);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd
        .spawn()
        .expect("cargo builds the gvault binary for its tests");
    let mut input = child.stdin.take().unwrap();
    if let Some(data) = stdin {
        input.write_all(data).unwrap();
    }
    drop(input);
    child.wait_with_output().unwrap()
}

fn code(o: &Output) -> i32 {
    o.status.code().unwrap()
}

fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn backup_restore_check_and_exit_codes() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("r");
    let src = tmp.path().join("src");
    std::fs::create_dir_all(src.join("d")).unwrap();
    let big: Vec<u8> = (0..3_000_000u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    std::fs::write(src.join("d/big"), &big).unwrap();
    std::fs::write(src.join("small"), b"small file").unwrap();
    std::os::unix::fs::symlink("small", src.join("link")).unwrap();
    let s = src.to_str().unwrap();
    let sizes = [
        "--min-size",
        "16K",
        "--avg-size",
        "64K",
        "--max-size",
        "256K",
    ];
    let o = run(&repo, &[&["init"][..], &sizes].concat(), &[], None);
    assert_eq!(code(&o), 0, "{}", err(&o));
    assert!(
        tmp.path().join("r.key").exists(),
        "the default key file beside the repository"
    );
    let o = run(&repo, &["backup", s], &[], None);
    assert_eq!(code(&o), 0, "{}", err(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("2 new, 0 changed, 0 unchanged files"));
    let o = run(&repo, &["backup", s, "--json"], &[], None);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["files_unchanged"], 2);
    assert_eq!(v["bytes_read"], 0);
    let o = run(&repo, &["snapshots", "--json"], &[], None);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["snapshots"].as_array().unwrap().len(), 2);
    let o = run(&repo, &["ls", "latest"], &[], None);
    assert!(String::from_utf8_lossy(&o.stdout).contains("link -> small"));
    // Restore equals the source.
    let out = tmp.path().join("out");
    let o = run(
        &repo,
        &["restore", "latest", "--target", out.to_str().unwrap()],
        &[],
        None,
    );
    assert_eq!(code(&o), 0, "{}", err(&o));
    let back = out.join(src.strip_prefix("/").unwrap());
    assert_eq!(std::fs::read(back.join("d/big")).unwrap(), big);
    assert_eq!(
        std::fs::read_link(back.join("link")).unwrap(),
        PathBuf::from("small")
    );
    // stdin backup and dump.
    let o = run(&repo, &["backup", "--stdin", "piped.bin"], &[], Some(&big));
    assert_eq!(code(&o), 0, "{}", err(&o));
    let o = run(&repo, &["dump", "latest", "piped.bin"], &[], None);
    assert_eq!(o.stdout, big);
    assert_eq!(code(&run(&repo, &["check", "--read-data"], &[], None)), 0);
    // An unreadable source file: reported, skipped, exit 3.
    let o = run(&repo, &["backup", s, "/proc/self/mem"], &[], None);
    assert_eq!(code(&o), 3, "{}", err(&o));
    assert!(err(&o).contains("/proc/self/mem"), "{}", err(&o));
    // A flipped byte in a pack: check names the file, restore fails it.
    let data = repo.join("data");
    for e in std::fs::read_dir(&data).unwrap() {
        let p = e.unwrap().path();
        let mut b = std::fs::read(&p).unwrap();
        b[100] ^= 0x10;
        std::fs::write(&p, &b).unwrap();
    }
    let o = run(&repo, &["check", "--read-data"], &[], None);
    assert_eq!(code(&o), 3, "{}", err(&o));
    assert!(
        err(&o).contains("big") || err(&o).contains("piped.bin"),
        "{}",
        err(&o)
    );
    let out2 = tmp.path().join("out2");
    let o = run(
        &repo,
        &["restore", "latest", "--target", out2.to_str().unwrap()],
        &[],
        None,
    );
    assert_eq!(code(&o), 3, "{}", err(&o));
    assert!(err(&o).contains("not restored"), "{}", err(&o));
    // Wrong key: exit 2 and a message saying so.
    let other = "11".repeat(32);
    let o = run(&repo, &["snapshots"], &[("GVAULT_KEY", &other)], None);
    assert_eq!(code(&o), 2);
    assert!(err(&o).contains("wrong master key"), "{}", err(&o));
    // No key at all.
    std::fs::rename(tmp.path().join("r.key"), tmp.path().join("elsewhere.key")).unwrap();
    let o = run(&repo, &["snapshots"], &[], None);
    assert_eq!(code(&o), 2);
    assert!(err(&o).contains("needs its master key"), "{}", err(&o));
    // A newer format: refused before any key is tried.
    let cfg = repo.join("config");
    let mut b = std::fs::read(&cfg).unwrap();
    b[8] = 9;
    std::fs::write(&cfg, &b).unwrap();
    let o = run(&repo, &["snapshots"], &[], None);
    assert_eq!(code(&o), 2);
    assert!(err(&o).contains("upgrade gvault"), "{}", err(&o));
}

#[test]
fn forget_policies_and_dry_run() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("r");
    let src = tmp.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("a"), b"one").unwrap();
    let s = src.to_str().unwrap();
    assert_eq!(code(&run(&repo, &["init"], &[], None)), 0);
    for v in [&b"two"[..], b"three"] {
        let o = run(&repo, &["backup", s], &[], None);
        assert_eq!(code(&o), 0, "{}", err(&o));
        std::fs::write(src.join("a"), v).unwrap();
    }
    let count = || {
        let o = run(&repo, &["snapshots", "--json"], &[], None);
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        v["snapshots"].as_array().unwrap().len()
    };
    // Both snapshots are of today: --keep-daily 1 keeps the newer only;
    // the dry run says so and removes nothing.
    let o = run(
        &repo,
        &["forget", "--keep-daily", "1", "--dry-run", "--json"],
        &[],
        None,
    );
    assert_eq!(code(&o), 0, "{}", err(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["removed"].as_array().unwrap().len(), 1);
    assert_eq!(v["snapshots"][0]["keep"][0], "daily");
    assert_eq!(count(), 2);
    // No rule, or a bad duration: refused, nothing removed.
    let o = run(&repo, &["forget"], &[], None);
    assert_eq!(code(&o), 2);
    assert!(err(&o).contains("--keep-last"), "{}", err(&o));
    let o = run(&repo, &["forget", "--keep-within", "2w"], &[], None);
    assert_eq!(code(&o), 2);
    assert!(err(&o).contains("unknown unit"), "{}", err(&o));
    // Both are within a day of the newest.
    let o = run(&repo, &["forget", "--keep-within", "1d"], &[], None);
    assert_eq!(code(&o), 0, "{}", err(&o));
    assert_eq!(count(), 2);
    let o = run(&repo, &["forget", "--keep-daily", "1"], &[], None);
    assert_eq!(code(&o), 0, "{}", err(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("removed 1 snapshots"));
    assert_eq!(count(), 1);
}
