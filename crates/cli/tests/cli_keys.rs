//! Encrypted stores from the command line: `init --encrypt`, every key
//! source, missing and wrong keys, data-key and master-key rotation.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;

mod common;
use common::{code, gvault_env, stderr};

/// Cheap Argon2id costs so passphrase tests take milliseconds.
const CHEAP_KDF: [&str; 4] = ["--kdf-memory-mib", "1", "--kdf-passes", "1"];

fn ok(o: Output) -> String {
    assert_eq!(code(&o), 0, "{o:?}");
    String::from_utf8(o.stdout).unwrap()
}

/// Every file of the store with its bytes.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let p = e.unwrap().path();
            let b = std::fs::read(&p).unwrap();
            (p, b)
        })
        .collect()
}

#[cfg(unix)]
fn mode(p: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[test]
fn key_file_default_and_errors_before_any_data_is_touched() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("vault");
    let out = ok(gvault_env(&d, &["init", "--encrypt"], &[]));
    let key = tmp.path().join("vault.key");
    assert!(out.contains(&key.display().to_string()), "{out}");
    assert!(key.exists() && !d.join("vault.key").exists());
    #[cfg(unix)]
    assert_eq!(mode(&key), 0o600);
    let kf = key.to_str().unwrap();
    ok(gvault_env(
        &d,
        &["put", "--key-file", kf, "a", "alpha"],
        &[],
    ));
    ok(gvault_env(
        &d,
        &["put", "a2", "beta"],
        &[("GVAULT_KEY_FILE", kf)],
    ));
    assert_eq!(
        ok(gvault_env(&d, &["get", "--key-file", kf, "a"], &[])),
        "alpha"
    );
    let hex = std::fs::read_to_string(&key).unwrap();
    assert_eq!(
        ok(gvault_env(
            &d,
            &["get", "a2"],
            &[("GVAULT_KEY", hex.trim())]
        )),
        "beta"
    );
    // The value is not stored in the clear.
    for b in snapshot(&d).values() {
        assert!(!b.windows(5).any(|w| w == b"alpha"));
    }

    // With no key given, the key file `init` made beside the store is used.
    assert_eq!(ok(gvault_env(&d, &["get", "a"], &[])), "alpha");

    // No key, a wrong key, a malformed key: exit 2, nothing changed.
    let before = snapshot(&d);
    let moved = tmp.path().join("moved.key");
    std::fs::rename(&key, &moved).unwrap();
    let o = gvault_env(&d, &["get", "a"], &[]);
    std::fs::rename(&moved, &key).unwrap();
    assert_eq!(code(&o), 2, "{o:?}");
    assert!(
        stderr(&o).contains("is encrypted") && stderr(&o).contains("--key-file"),
        "{}",
        stderr(&o)
    );
    let other = tmp.path().join("other.key");
    ok(gvault_env(
        &tmp.path().join("other"),
        &["init", "--encrypt", "--key-file", other.to_str().unwrap()],
        &[],
    ));
    let o = gvault_env(
        &d,
        &["get", "--key-file", other.to_str().unwrap(), "a"],
        &[],
    );
    assert_eq!(code(&o), 2, "{o:?}");
    assert!(stderr(&o).contains("wrong master key"), "{}", stderr(&o));
    let o = gvault_env(&d, &["get", "a"], &[("GVAULT_KEY", "abcd")]);
    assert_eq!(code(&o), 2, "{o:?}");
    assert!(stderr(&o).contains("64 hexadecimal"), "{}", stderr(&o));
    let o = gvault_env(&d, &["put", "a", "x"], &[("GVAULT_PASSPHRASE", "pw")]);
    assert_eq!(code(&o), 2, "{o:?}");
    assert_eq!(before, snapshot(&d), "a refused open changed the store");

    // The default key file is never overwritten; a key file others can
    // read is refused.
    std::fs::remove_dir_all(&d).unwrap();
    let o = gvault_env(&d, &["init", "--encrypt"], &[]);
    assert_eq!(code(&o), 2, "{o:?}");
    assert!(stderr(&o).contains("refusing to overwrite"), "{o:?}");
    assert_eq!(std::fs::read_to_string(&key).unwrap(), hex);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&other, std::fs::Permissions::from_mode(0o644)).unwrap();
        let o = gvault_env(
            &tmp.path().join("other"),
            &["get", "--key-file", other.to_str().unwrap(), "a"],
            &[],
        );
        assert_eq!(code(&o), 2);
        assert!(stderr(&o).contains("chmod 600"), "{o:?}");
    }
    // A key for a store that is not encrypted: refused.
    let plain = tmp.path().join("plain");
    ok(gvault_env(&plain, &["init"], &[]));
    let o = gvault_env(&plain, &["get", "--key-file", kf, "a"], &[]);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("not encrypted"), "{o:?}");
    // ... but a stray `<store>.key` beside a plain store is not picked up.
    std::fs::copy(&key, tmp.path().join("plain.key")).unwrap();
    ok(gvault_env(&plain, &["put", "p", "q"], &[]));
    assert_eq!(ok(gvault_env(&plain, &["get", "p"], &[])), "q");
}

#[test]
fn init_encrypt_creates_missing_parent_directories() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("a").join("b").join("vault");
    let out = ok(gvault_env(&d, &["init", "--encrypt"], &[]));
    let key = tmp.path().join("a").join("b").join("vault.key");
    assert!(key.exists() && d.join("CURRENT").exists(), "{out}");
    ok(gvault_env(&d, &["put", "k", "v"], &[]));
    assert_eq!(ok(gvault_env(&d, &["get", "k"], &[])), "v");
}

#[test]
fn passphrase_and_master_rotation() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("s");
    let pw = [("MY_PW", "correct horse")];
    let mut init = vec!["init", "--encrypt", "--passphrase-env", "MY_PW"];
    init.extend(CHEAP_KDF);
    ok(gvault_env(&d, &init, &pw));
    assert!(!tmp.path().join("s.key").exists());
    ok(gvault_env(
        &d,
        &["put", "--passphrase-env", "MY_PW", "k", "v1"],
        &pw,
    ));
    assert_eq!(
        ok(gvault_env(
            &d,
            &["get", "k"],
            &[("GVAULT_PASSPHRASE", "correct horse")]
        )),
        "v1"
    );
    let o = gvault_env(&d, &["get", "k"], &[("GVAULT_PASSPHRASE", "wrong horse")]);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("wrong master key"), "{o:?}");

    // To a new key file, created with mode 0600.
    let nk = tmp.path().join("new.key");
    let nks = nk.to_str().unwrap();
    ok(gvault_env(
        &d,
        &["keys", "rotate-master", "--new-key-file", nks],
        &[("GVAULT_PASSPHRASE", "correct horse")],
    ));
    #[cfg(unix)]
    assert_eq!(mode(&nk), 0o600);
    let o = gvault_env(&d, &["get", "k"], &[("GVAULT_PASSPHRASE", "correct horse")]);
    assert_eq!(code(&o), 2, "the old passphrase still opens the store");
    assert_eq!(
        ok(gvault_env(&d, &["get", "--key-file", nks, "k"], &[])),
        "v1"
    );

    // And back to another passphrase.
    let mut rm = vec!["keys", "rotate-master", "--new-passphrase-env", "NEW_PW"];
    rm.extend(CHEAP_KDF);
    ok(gvault_env(
        &d,
        &rm,
        &[("GVAULT_KEY_FILE", nks), ("NEW_PW", "battery staple")],
    ));
    assert_eq!(
        code(&gvault_env(&d, &["get", "--key-file", nks, "k"], &[])),
        2
    );
    assert_eq!(
        ok(gvault_env(
            &d,
            &["get", "k"],
            &[("GVAULT_PASSPHRASE", "battery staple")]
        )),
        "v1"
    );
}

#[test]
fn rotate_reencrypt_status_and_verify() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("s");
    let key = tmp.path().join("k");
    let kf = key.to_str().unwrap();
    let env = [("GVAULT_KEY_FILE", kf)];
    ok(gvault_env(
        &d,
        &["init", "--encrypt", "--key-file", kf],
        &[],
    ));
    let value = |i: usize| format!("value-{i}-{}", "x".repeat(i % 3 * 900));
    let lines: String = (0..300)
        .map(|i| format!("{{\"key\":\"k{i:03}\",\"value\":\"{}\"}}\n", value(i)))
        .collect();
    let import = tmp.path().join("in.jsonl");
    std::fs::write(&import, lines).unwrap();
    ok(gvault_env(&d, &["import", import.to_str().unwrap()], &env));

    let status = ok(gvault_env(&d, &["keys", "status"], &env));
    assert!(status.contains("current"), "{status}");
    let out = ok(gvault_env(&d, &["keys", "rotate"], &env));
    assert!(out.contains("new data key 2"), "{out}");
    let status = ok(gvault_env(&d, &["keys", "status"], &env));
    let row = |s: &str, id: &str| {
        s.lines()
            .find(|l| l.split_whitespace().next() == Some(id))
            .map(|l| l.split_whitespace().map(String::from).collect::<Vec<_>>())
    };
    let old = row(&status, "1").expect("key 1 listed");
    assert_eq!(old[1], "old", "{status}");
    assert_ne!(old[2], "0", "{status}");
    assert!(status.contains("keys reencrypt"), "{status}");

    let out = ok(gvault_env(&d, &["keys", "reencrypt", "--rate", "0"], &env));
    assert!(out.contains("retired keys [1]"), "{out}");
    let status = ok(gvault_env(&d, &["keys", "status"], &env));
    assert_eq!(row(&status, "1").unwrap()[1], "retired", "{status}");
    assert_eq!(row(&status, "2").unwrap()[1], "current", "{status}");
    // Running it again finds nothing to do.
    let out = ok(gvault_env(&d, &["keys", "reencrypt"], &env));
    assert!(out.contains("retired keys []"), "{out}");

    for i in [0usize, 1, 2, 150, 299] {
        assert_eq!(
            ok(gvault_env(&d, &["get", &format!("k{i:03}")], &env)),
            value(i)
        );
    }
    let out = ok(gvault_env(&d, &["verify"], &env));
    assert!(!out.is_empty());
    // The keys commands refuse a store that is not encrypted.
    let plain = tmp.path().join("plain");
    ok(gvault_env(&plain, &["init"], &[]));
    let o = gvault_env(&plain, &["keys", "rotate"], &[]);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("not encrypted"), "{o:?}");
    // --accel gpu on a machine without a GPU fails clearly; auto works.
    let o = gvault_env(&d, &["get", "--accel", "auto", "k001"], &env);
    assert_eq!(code(&o), 0, "{o:?}");
    if gvault_accel::GpuBackend::probe().is_err() {
        let o = gvault_env(&d, &["get", "--accel", "gpu", "k001"], &env);
        assert_eq!(code(&o), 2);
        assert!(stderr(&o).contains("no usable GPU"), "{o:?}");
    }
}

#[test]
fn rotating_away_from_the_default_key_file_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("vault");
    ok(gvault_env(&d, &["init", "--encrypt"], &[]));
    ok(gvault_env(&d, &["put", "k", "v"], &[]));
    let new = tmp.path().join("new.key");
    let out = ok(gvault_env(
        &d,
        &[
            "keys",
            "rotate-master",
            "--new-key-file",
            new.to_str().unwrap(),
        ],
        &[],
    ));
    assert!(out.contains("still holds the old master key"), "{out}");
    // The default file now holds a key that does not open the store: the
    // error says that key was read from there.
    let o = gvault_env(&d, &["get", "k"], &[]);
    assert_eq!(code(&o), 2, "{o:?}");
    assert!(
        stderr(&o).contains("wrong master key") && stderr(&o).contains("default key file"),
        "{}",
        stderr(&o)
    );
    assert_eq!(
        ok(gvault_env(
            &d,
            &["get", "--key-file", new.to_str().unwrap(), "k"],
            &[]
        )),
        "v"
    );
}
