//! `gvault repo … --repo s3://bucket/prefix` against a real S3 server
//! (SeaweedFS via scripts/s3-server.sh), and `gvault repo copy` between a
//! directory and a bucket. Without a cached server binary the tests print
//! "skipped: …" and pass, unless `GVAULT_S3_REQUIRE=1`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

#[path = "../../cas/tests/s3_server/mod.rs"]
mod s3_server;

use s3_server::S3Server;

/// The server, and the `$XDG_CACHE_HOME` of the commands run against it
/// (where the default metadata cache goes).
struct Server {
    s3: S3Server,
    cache: tempfile::TempDir,
}

impl Server {
    fn start(test: &str) -> Option<Server> {
        Some(Server {
            s3: S3Server::start(test)?,
            cache: tempfile::tempdir().unwrap(),
        })
    }
    fn url(&self, prefix: &str) -> String {
        format!("s3://{}/{prefix}", self.s3.var("GVAULT_S3_BUCKET"))
    }
}

/// `gvault repo ARGS` with the server's credentials in the environment
/// (and its endpoint, unless `endpoint_env` is false).
fn run(srv: &Server, args: &[&str], endpoint_env: bool) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_gvault"));
    c.arg("repo")
        .args(args)
        .env("GVAULT_CPU_THREADS", "2")
        .env("XDG_CACHE_HOME", srv.cache.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for v in [
        "GVAULT_KEY",
        "GVAULT_KEY_FILE",
        "GVAULT_PASSPHRASE",
        "GVAULT_REPO",
        "AWS_ENDPOINT_URL",
        "AWS_PROFILE",
    ] {
        c.env_remove(v);
    }
    for (k, v) in &srv.s3.env {
        if k.starts_with("AWS_") && (endpoint_env || k != "AWS_ENDPOINT_URL") {
            c.env(k, v);
        }
    }
    c.output().unwrap()
}

fn ok(o: &Output) -> String {
    assert!(
        o.status.success(),
        "exit {:?}: {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn json(o: &Output) -> serde_json::Value {
    serde_json::from_str(&ok(o)).unwrap()
}

fn files(root: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.insert(
                    p.strip_prefix(root).unwrap().to_path_buf(),
                    std::fs::read(&p).unwrap(),
                );
            }
        }
    }
    out
}

#[test]
fn s3_repository_commands_and_copy_both_ways() {
    let Some(srv) = Server::start("s3_repository_commands_and_copy_both_ways") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    std::fs::create_dir_all(src.join("d")).unwrap();
    let big: Vec<u8> = (0..3_000_000u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    std::fs::write(src.join("d/big"), &big).unwrap();
    std::fs::write(src.join("small"), b"hello s3").unwrap();
    let key = tmp.path().join("s3.key");
    let key_s = key.to_str().unwrap();
    let url = srv.url("cli/repo");
    let endpoint = srv.s3.env["AWS_ENDPOINT_URL"].clone();

    // init needs a named key: there is no directory to put one beside.
    let o = run(&srv, &["init", "--repo", &url], true);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--key-file"));
    // Through --s3-endpoint rather than AWS_ENDPOINT_URL.
    ok(&run(
        &srv,
        &[
            "init",
            "--repo",
            &url,
            "--key-file",
            key_s,
            "--s3-endpoint",
            &endpoint,
            "--min-size",
            "4K",
            "--avg-size",
            "16K",
            "--max-size",
            "64K",
        ],
        false,
    ));
    let o = run(&srv, &["init", "--repo", &url, "--key-file", key_s], true);
    assert_eq!(o.status.code(), Some(2), "a second init must fail");

    let b = json(&run(
        &srv,
        &[
            "backup",
            "--repo",
            &url,
            "--key-file",
            key_s,
            "--json",
            "--s3-connections",
            "4",
            src.to_str().unwrap(),
        ],
        true,
    ));
    assert!(b["packs_written"].as_u64().unwrap() > 0);
    let snaps = json(&run(
        &srv,
        &["snapshots", "--repo", &url, "--key-file", key_s, "--json"],
        true,
    ));
    assert_eq!(snaps["snapshots"].as_array().unwrap().len(), 1);
    let out = tmp.path().join("out");
    ok(&run(
        &srv,
        &[
            "restore",
            "latest",
            "--repo",
            &url,
            "--key-file",
            key_s,
            "--target",
            out.to_str().unwrap(),
        ],
        true,
    ));
    assert_eq!(
        files(&src),
        files(&out.join(src.strip_prefix("/").unwrap()))
    );
    let c = json(&run(
        &srv,
        &[
            "check",
            "--read-data",
            "--repo",
            &url,
            "--key-file",
            key_s,
            "--json",
        ],
        true,
    ));
    assert_eq!(c["clean"], true);

    // Copy to a local repository (its own key), then again: skipped.
    let local = tmp.path().join("local");
    ok(&run(
        &srv,
        &[
            "init",
            "--repo",
            local.to_str().unwrap(),
            "--min-size",
            "4K",
            "--avg-size",
            "16K",
            "--max-size",
            "64K",
        ],
        true,
    ));
    let local_key = tmp.path().join("local.key");
    let copy = |from: &str, to: &str, from_key: &str, to_key: &str| {
        json(&run(
            &srv,
            &[
                "copy",
                "--from",
                from,
                "--to",
                to,
                "--from-key-file",
                from_key,
                "--key-file",
                to_key,
                "--json",
            ],
            true,
        ))
    };
    let l = local.to_str().unwrap();
    let lk = local_key.to_str().unwrap();
    let c1 = copy(&url, l, key_s, lk);
    assert_eq!(c1["copied"].as_array().unwrap().len(), 1);
    assert!(c1["copied"][0]["chunks_new"].as_u64().unwrap() > 10);
    let c2 = copy(&url, l, key_s, lk);
    assert_eq!(c2["copied"].as_array().unwrap().len(), 0);
    assert_eq!(c2["skipped"].as_array().unwrap().len(), 1);
    let out2 = tmp.path().join("out2");
    ok(&run(
        &srv,
        &[
            "restore",
            "latest",
            "--repo",
            l,
            "--target",
            out2.to_str().unwrap(),
        ],
        true,
    ));
    assert_eq!(
        files(&src),
        files(&out2.join(src.strip_prefix("/").unwrap()))
    );
    // A new local snapshot with one small change goes back to S3 moving
    // only the chunks S3 lacks.
    std::fs::write(src.join("small"), b"changed").unwrap();
    ok(&run(
        &srv,
        &["backup", "--repo", l, src.to_str().unwrap()],
        true,
    ));
    let c3 = copy(l, &url, lk, key_s);
    let copied = c3["copied"].as_array().unwrap();
    assert_eq!(copied.len(), 1, "{c3}");
    assert!(copied[0]["chunks_new"].as_u64().unwrap() <= 2, "{c3}");
    assert!(copied[0]["chunks_known"].as_u64().unwrap() > 10, "{c3}");
    assert_eq!(c3["skipped"].as_array().unwrap().len(), 1);
    let c = json(&run(
        &srv,
        &[
            "check",
            "--read-data",
            "--repo",
            &url,
            "--key-file",
            key_s,
            "--json",
        ],
        true,
    ));
    assert_eq!(c["clean"], true);
    assert_eq!(c["snapshots"], 2);
}

#[test]
fn s3_errors_are_clear() {
    let Some(srv) = Server::start("s3_errors_are_clear") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let key = tmp.path().join("k");
    let k = key.to_str().unwrap();
    let err = |args: &[&str]| {
        let o = run(&srv, args, true);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    let e = err(&["init", "--repo", "s3://no-such-bucket/x", "--key-file", k]);
    assert!(e.contains("does not exist"), "{e}");
    assert!(!key.exists(), "a failed init left a key file");
    let e = err(&["snapshots", "--repo", &srv.url("nothing-here")]);
    assert!(e.contains("not a gvault repository"), "{e}");
    let e = err(&["snapshots", "--repo", "s3://UPPER/x"]);
    assert!(e.contains("not an S3 repository URL"), "{e}");
    let e = err(&["snapshots", "--repo", "gs://bucket/x"]);
    assert!(e.contains("only local directories and s3://"), "{e}");
    let e = err(&[
        "snapshots",
        "--repo",
        &srv.url("x"),
        "--s3-endpoint",
        "ftp://127.0.0.1:1",
    ]);
    assert!(e.contains("must start with https://"), "{e}");
}

/// The metadata cache from the command line: by default under
/// $XDG_CACHE_HOME/gvault/repos/<id>/, elsewhere with --cache-dir, none with
/// --no-cache; a damaged cache file changes no answer, and a prune by
/// another client is seen.
#[test]
fn s3_metadata_cache_from_the_command_line() {
    let Some(srv) = Server::start("s3_metadata_cache_from_the_command_line") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("a"), vec![7u8; 100_000]).unwrap();
    let key = tmp.path().join("k");
    let k = key.to_str().unwrap();
    let url = srv.url("cli/cache");
    let s = src.to_str().unwrap();
    let init = json(&run(
        &srv,
        &["init", "--repo", &url, "--key-file", k, "--json"],
        true,
    ));
    let id = init["id"].as_str().unwrap().to_string();
    let cmd = |extra: &[&str], args: &[&str]| {
        let mut a: Vec<&str> = args.to_vec();
        a.extend_from_slice(&["--repo", &url, "--key-file", k]);
        a.extend_from_slice(extra);
        run(&srv, &a, true)
    };
    ok(&cmd(&[], &["backup", s]));
    std::fs::write(src.join("b"), b"second").unwrap();
    ok(&cmd(&[], &["backup", s]));
    let dir = srv.cache.path().join("gvault/repos").join(&id);
    let count = |d: &Path| {
        std::fs::read_dir(d)
            .map(|r| {
                r.filter(|e| {
                    !e.as_ref()
                        .unwrap()
                        .file_name()
                        .to_string_lossy()
                        .starts_with('.')
                })
                .count()
            })
            .unwrap_or(0)
    };
    assert_eq!(count(&dir.join("snapshots")), 2);
    assert_eq!(count(&dir.join("index")), 2);
    let listed = ok(&cmd(&[], &["snapshots"]));
    // A damaged cache file is found and read again: the same answer.
    for e in std::fs::read_dir(dir.join("snapshots")).unwrap() {
        let p = e.unwrap().path();
        let mut b = std::fs::read(&p).unwrap();
        b[20] ^= 1;
        std::fs::write(&p, b).unwrap();
    }
    assert_eq!(ok(&cmd(&[], &["snapshots"])), listed);
    // --cache-dir and --no-cache.
    let other = tmp.path().join("other-cache");
    let o = other.to_str().unwrap();
    assert_eq!(ok(&cmd(&["--cache-dir", o], &["snapshots"])), listed);
    assert_eq!(count(&other.join(&id).join("snapshots")), 2);
    let none = tmp.path().join("none");
    let n = none.to_str().unwrap();
    let o = cmd(&["--cache-dir", n, "--no-cache"], &["snapshots"]);
    assert_eq!(
        o.status.code(),
        Some(2),
        "--cache-dir and --no-cache conflict"
    );
    std::fs::remove_dir_all(&other).unwrap();
    assert_eq!(ok(&cmd(&["--no-cache"], &["snapshots"])), listed);
    assert!(!other.exists());
    // Another client (its own cache) forgets the first snapshot and
    // prunes: the default cache drops it and restores stay whole.
    let first = listed.split_whitespace().next().unwrap().to_string();
    ok(&cmd(&["--no-cache"], &["forget", "--keep-last", "1"]));
    ok(&cmd(&["--no-cache"], &["prune"]));
    let now = ok(&cmd(&[], &["snapshots"]));
    assert_eq!(now.lines().count(), 1, "{now}");
    assert!(!now.contains(&first), "{now}");
    assert_eq!(count(&dir.join("snapshots")), 1);
    let out = tmp.path().join("out");
    ok(&cmd(
        &[],
        &["restore", "latest", "--target", out.to_str().unwrap()],
    ));
    assert_eq!(
        files(&src),
        files(&out.join(src.strip_prefix("/").unwrap()))
    );
    let c = json(&cmd(&[], &["check", "--read-data", "--json"]));
    assert_eq!(c["clean"], true);
}

/// `gvault bench cas --repo s3://…`, small: a local row and one per
/// connection count, ratios against the local row, and nothing left in
/// the bucket afterwards.
#[test]
fn bench_cas_against_s3() {
    let Some(srv) = Server::start("bench_cas_against_s3") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_str().unwrap();
    let save = tmp.path().join("s3.json");
    let url = srv.url("bench");
    let mut c = Command::new(env!("CARGO_BIN_EXE_gvault"));
    c.args([
        "bench", "cas", "--repo", &url, "--size", "4M", "--repeat", "1",
    ])
    .args([
        "--s3-connections",
        "1,4",
        "--data-dir",
        dir,
        "--repo-dir",
        dir,
    ])
    .args(["--save", save.to_str().unwrap()])
    .env("GVAULT_CPU_THREADS", "2")
    .env_remove("AWS_PROFILE");
    for (k, v) in &srv.s3.env {
        if k.starts_with("AWS_") {
            c.env(k, v);
        }
    }
    let child = c
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = ok(&child.wait_with_output().unwrap());
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&save).unwrap()).unwrap();
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 3, "{out}");
    assert_eq!(rows[0]["repo"], "local");
    assert_eq!(rows[0]["backup_ratio"], 1.0);
    for (r, n) in rows[1..].iter().zip([1, 4]) {
        assert_eq!(r["repo"], "s3", "{out}");
        assert_eq!(r["connections"], n);
        assert!(r["backup_gbps"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["restore_ratio"].as_f64().unwrap() > 0.0, "{r}");
    }
    assert!(out.contains("×local"), "{out}");
    // Every scratch repository (run n under <url>/gvault-bench-<pid>-<n>)
    // was removed from the bucket.
    let opts = gvault_cas::S3Options {
        endpoint: Some(srv.s3.env["AWS_ENDPOINT_URL"].clone()),
        credentials: Some(gvault_cas::S3Credentials {
            access_key_id: srv.s3.env["AWS_ACCESS_KEY_ID"].clone(),
            secret_access_key: srv.s3.env["AWS_SECRET_ACCESS_KEY"].clone(),
            session_token: None,
        }),
        region: Some("us-east-1".into()),
        ..Default::default()
    };
    for n in 2..=3 {
        use gvault_cas::Backend;
        let b = gvault_cas::S3Backend::connect(&format!("{url}/gvault-bench-{pid}-{n}"), &opts)
            .unwrap();
        for k in gvault_cas::Kind::ALL {
            assert!(b.list(k).unwrap().is_empty(), "run {n}: {k:?} left");
        }
        assert!(b.get_root("config").is_err(), "run {n}: config left");
    }
}
