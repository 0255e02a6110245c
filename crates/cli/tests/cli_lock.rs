//! Several `gvault` processes on one store: writers wait for each other
//! (`--wait`, `GVAULT_WAIT`), readers share the store and change nothing,
//! and a directory that is not a store is left as it was.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Output, Stdio};

mod common;
use common::{command, gvault};
use std::time::Duration;

fn ok(o: Output) -> String {
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    String::from_utf8(o.stdout).unwrap()
}

fn failed(o: &Output) -> String {
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Every entry below `dir` with its bytes (`None` for a directory).
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Option<Vec<u8>>> {
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.to_owned()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                out.insert(p.clone(), None);
                todo.push(p);
            } else {
                out.insert(p.clone(), Some(std::fs::read(&p).unwrap()));
            }
        }
    }
    out
}

#[test]
fn concurrent_one_shot_puts_all_succeed() {
    const LOOPS: usize = 3;
    const PUTS: usize = 20;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    ok(gvault(&dir, &["init"]));
    let loops: Vec<_> = (0..LOOPS)
        .map(|l| {
            let dir = dir.clone();
            std::thread::spawn(move || {
                for i in 0..PUTS {
                    let (k, v) = (format!("l{l}-{i:03}"), format!("value {l} {i}"));
                    let o = gvault(&dir, &["put", &k, &v]);
                    assert_eq!(o.status.code(), Some(0), "put {k}: {o:?}");
                }
            })
        })
        .collect();
    for l in loops {
        l.join().unwrap();
    }
    let out = ok(gvault(&dir, &["scan"]));
    let mut want: Vec<String> = (0..LOOPS)
        .flat_map(|l| (0..PUTS).map(move |i| format!("l{l}-{i:03}\tvalue {l} {i}")))
        .collect();
    want.sort();
    assert_eq!(out.lines().collect::<Vec<_>>(), want);
}

/// Kills and reaps a child on the way out, so a failed assertion does not
/// leave a process holding the store.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn readers_share_the_store_and_writers_wait() {
    const RECORDS: usize = 5000;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    ok(gvault(&dir, &["init"]));
    let mut lines = String::new();
    for i in 0..RECORDS {
        lines.push_str(&format!(
            "{{\"key\": \"k{i:05}\", \"value\": \"{}\"}}\n",
            "v".repeat(100)
        ));
    }
    let input = tmp.path().join("records.jsonl");
    std::fs::write(&input, lines).unwrap();
    ok(gvault(&dir, &["import", input.to_str().unwrap()]));

    // A scan whose output nobody reads yet: it stops on the full pipe,
    // holding the store open for reading.
    let mut scan = Reaped(command(&dir, &["scan"]).spawn().unwrap());
    let mut out = BufReader::new(scan.0.stdout.take().unwrap());
    let mut first = String::new();
    out.read_line(&mut first).unwrap();
    assert!(first.starts_with("k00000\t"), "{first:?}");

    // Readers run beside it without waiting.
    let got = ok(gvault(&dir, &["get", "k01234", "--wait", "0"]));
    assert_eq!(got, "v".repeat(100));
    ok(gvault(&dir, &["stats", "--wait", "0"]));
    assert!(ok(gvault(&dir, &["verify", "--wait", "0"])).contains("no problems"));

    // A writer waits as long as it is told, then says how to wait longer.
    let e = failed(&gvault(&dir, &["put", "x", "y", "--wait", "0.3"]));
    assert!(e.contains("locked by another process"), "{e}");
    assert!(e.contains("0.3 s") && e.contains("--wait"), "{e}");
    let e = failed(
        &command(&dir, &["del", "k00001"])
            .env("GVAULT_WAIT", "0.2")
            .output()
            .unwrap(),
    );
    assert!(e.contains("0.2 s"), "{e}");
    let e = failed(&gvault(&dir, &["put", "x", "y", "--wait=-1"]));
    assert!(e.contains("0 or more"), "{e}");

    // By default it waits until the reader is done.
    let mut put = Reaped(command(&dir, &["put", "x", "y"]).spawn().unwrap());
    std::thread::sleep(Duration::from_millis(500));
    assert!(put.0.try_wait().unwrap().is_none(), "the put did not wait");
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    assert_eq!(first.len() + rest.len(), RECORDS * (7 + 100 + 1));
    assert!(scan.0.wait().unwrap().success());
    assert!(put.0.wait().unwrap().success());
    assert_eq!(ok(gvault(&dir, &["get", "x"])), "y");
    // A reader waits for a writer too: import holds the store while it
    // reads its input.
    let mut import = Reaped(
        command(&dir, &["import"])
            .stdin(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut feed = import.0.stdin.take().unwrap();
    feed.write_all(b"{\"key\": \"late\", \"value\": \"1\"}\n")
        .unwrap();
    feed.flush().unwrap();
    // The import has the store once a reader that may not wait is refused.
    let mut refused = false;
    for _ in 0..200 {
        let o = gvault(&dir, &["get", "x", "--wait", "0"]);
        if o.status.code() == Some(2) {
            assert!(failed(&o).contains("locked"), "{o:?}");
            refused = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    assert!(refused, "the import never took the store");
    let get = command(&dir, &["get", "late"]).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    drop(feed);
    assert!(import.0.wait().unwrap().success());
    assert_eq!(ok(get.wait_with_output().unwrap()), "1");
}

#[test]
fn reading_commands_change_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    for encrypt in [false, true] {
        let dir = tmp.path().join(if encrypt { "secret" } else { "plain" });
        let mut init = vec!["init"];
        if encrypt {
            init.push("--encrypt");
        }
        ok(gvault(&dir, &init));
        for i in 0..5 {
            let big = "b".repeat(3000);
            let v = if i % 2 == 0 { big.as_str() } else { "small" };
            ok(gvault(&dir, &["put", &format!("k{i}"), v]));
        }
        ok(gvault(&dir, &["del", "k3"]));
        // The last writes live only in the value log: a read-write open
        // would flush them, start a new manifest and value-log head.
        let before = snapshot(&dir);
        assert_eq!(ok(gvault(&dir, &["get", "k4"])), "b".repeat(3000));
        assert_eq!(ok(gvault(&dir, &["get", "k1"])), "small");
        let keys = ok(gvault(&dir, &["scan", "--keys-only"]));
        assert_eq!(keys, "k0\nk1\nk2\nk4\n");
        ok(gvault(&dir, &["stats"]));
        assert!(ok(gvault(&dir, &["verify"])).contains("no problems"));
        if encrypt {
            assert!(ok(gvault(&dir, &["keys", "status"])).contains("current"));
        }
        assert!(
            snapshot(&dir) == before,
            "a reading command changed {dir:?}"
        );
    }
}

#[test]
fn a_directory_that_is_not_a_store_is_left_as_it_was() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("photos");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("notes.txt"), "hello").unwrap();
    let before = snapshot(&dir);
    let commands: [&[&str]; 6] = [
        &["get", "k"],
        &["put", "k", "v"],
        &["scan"],
        &["stats"],
        &["verify"],
        &["gc"],
    ];
    for args in commands {
        let e = failed(&gvault(&dir, args));
        assert!(e.contains("not a gvault store"), "{args:?}: {e}");
        assert!(snapshot(&dir) == before, "{args:?} changed the directory");
    }
}
