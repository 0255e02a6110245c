//! `gvault serve` as users run it: a daemon process, store and repo
//! commands with `--accel service`, `serve status`, SIGTERM, and what a
//! client does when no daemon answers.

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{gvault, gvault_env, stderr, stdout};

struct Serve {
    child: Option<Child>,
}

impl Serve {
    fn start(socket: &Path) -> Serve {
        let child = Command::new(env!("CARGO_BIN_EXE_gvault"))
            .args(["serve", "--accel", "cpu", "--socket"])
            .arg(socket)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let t = Instant::now();
        while std::os::unix::net::UnixStream::connect(socket).is_err() {
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "the daemon did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Serve { child: Some(child) }
    }

    /// SIGTERM, then the exit status and the daemon's log.
    fn terminate(mut self) -> (std::process::ExitStatus, String) {
        let child = self.child.take().unwrap();
        sigterm(child.id());
        let out = child.wait_with_output().unwrap();
        (
            out.status,
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn sigterm(pid: u32) {
    let ok = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok);
}

#[test]
fn store_and_repo_commands_run_through_the_daemon() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("gvault.sock");
    let serve = Serve::start(&socket);
    let accel = format!("service:{}", socket.display());
    let store = dir.path().join("store");

    let o = gvault(&store, &["init", "--encrypt", "--accel", &accel]);
    assert!(o.status.success(), "{}", stderr(&o));
    let env = [("GVAULT_ACCEL", accel.as_str())];
    let o = gvault_env(&store, &["put", "k", "a value sealed by the daemon"], &env);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = gvault_env(&store, &["get", "k"], &env);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o).trim_end(), "a value sealed by the daemon");
    assert!(!stderr(&o).contains("warning"), "{}", stderr(&o));

    // A repository: backup and restore through the daemon.
    let src = dir.path().join("src");
    std::fs::create_dir(&src).unwrap();
    let data: Vec<u8> = (0..3_000_000u32)
        .map(|i| ((i * 2654435761u32) >> 13) as u8)
        .collect();
    std::fs::write(src.join("big"), &data).unwrap();
    let repo = dir.path().join("repo");
    let r = repo.to_str().unwrap();
    for args in [
        vec!["repo", "init", "--repo", r],
        vec!["repo", "backup", "--repo", r, src.to_str().unwrap()],
    ] {
        let o = gvault_env(&store, &args, &env);
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
    }
    let target = dir.path().join("restored");
    let o = gvault_env(
        &store,
        &[
            "repo",
            "restore",
            "--repo",
            r,
            "latest",
            "--target",
            target.to_str().unwrap(),
        ],
        &env,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let back = std::fs::read(
        target
            .join(src.strip_prefix("/").unwrap_or(&src))
            .join("big"),
    )
    .or_else(|_| std::fs::read(target.join("big")))
    .unwrap();
    assert!(back == data);

    // The daemon did the work.
    let o = gvault(
        &store,
        &[
            "serve",
            "status",
            "--json",
            "--socket",
            socket.to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let st: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let ops: Vec<&str> = st["ops"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["op"].as_str().unwrap())
        .collect();
    for op in ["aes256gcm-seal", "aes256gcm-open", "fastcdc-blake3"] {
        assert!(ops.contains(&op), "{op} missing: {st}");
    }
    let o = gvault(
        &store,
        &["serve", "status", "--socket", socket.to_str().unwrap()],
    );
    assert!(stdout(&o).contains("aes256gcm-seal"), "{}", stdout(&o));

    // SIGTERM: a clean exit, the socket removed.
    let (status, log) = serve.terminate();
    assert!(status.success(), "{log}");
    assert!(log.contains("stopped"), "{log}");
    assert!(!socket.exists());

    // No daemon: a warning and the work runs in process ...
    let o = gvault_env(&store, &["get", "k"], &env);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("no gvault service"), "{}", stderr(&o));
    // ... unless the daemon is required.
    let o = gvault_env(
        &store,
        &["get", "k"],
        &[
            ("GVAULT_ACCEL", accel.as_str()),
            ("GVAULT_SERVICE_REQUIRE", "1"),
        ],
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("GVAULT_SERVICE_REQUIRE"),
        "{}",
        stderr(&o)
    );
    // A bad spec is a clear error.
    let o = gvault_env(&store, &["get", "k"], &[("GVAULT_ACCEL", "quantum")]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("GVAULT_ACCEL"), "{}", stderr(&o));
}

#[test]
fn serve_refuses_a_socket_another_daemon_holds() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("s.sock");
    let _serve = Serve::start(&socket);
    let o = gvault(
        dir.path(),
        &[
            "serve",
            "--accel",
            "cpu",
            "--socket",
            socket.to_str().unwrap(),
        ],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("already answers"), "{}", stderr(&o));
    let o = gvault(
        dir.path(),
        &[
            "serve",
            "status",
            "--socket",
            dir.path().join("none").to_str().unwrap(),
        ],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("no gvault service"), "{}", stderr(&o));
}
