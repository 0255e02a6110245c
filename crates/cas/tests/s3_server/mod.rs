//! A real S3 server for tests: SeaweedFS, started by scripts/s3-server.sh
//! in a temporary directory. Shared by crates/cas/tests/s3.rs and (included
//! by path) crates/cli/tests/cli_s3.rs.
//!
//! Without a cached server binary (`scripts/s3-server.sh build` needs Go)
//! a test calls [`skip`], which prints "skipped: …" past the harness's
//! capture and lets it pass, unless `GVAULT_S3_REQUIRE=1` (CI with Go)
//! makes that a failure.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

fn script() -> PathBuf {
    // Both crates sit two levels below the repository root.
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/s3-server.sh")
}

/// Reports a skipped test where it is seen (or fails it under
/// `GVAULT_S3_REQUIRE=1`).
pub fn skip(test: &str, why: &str) {
    if std::env::var_os("GVAULT_S3_REQUIRE").is_some_and(|v| v == "1") {
        panic!("GVAULT_S3_REQUIRE=1 but {why}");
    }
    let _ = writeln!(std::io::stderr(), "skipped: {test}: {why}");
}

/// A server in its own directory; stopped when dropped, and in any case
/// when this test process ends (the script watches our pid). `env` is what
/// the script printed: `AWS_ENDPOINT_URL`, the keys, `GVAULT_S3_BUCKET`,
/// `GVAULT_S3_PID`.
pub struct S3Server {
    dir: tempfile::TempDir,
    pub env: BTreeMap<String, String>,
}

impl S3Server {
    /// A running server, or `None` (after [`skip`]) without a binary.
    pub fn start(test: &str) -> Option<S3Server> {
        if !Command::new(script())
            .arg("have")
            .status()
            .is_ok_and(|s| s.success())
        {
            skip(
                test,
                "no SeaweedFS binary cached (run scripts/s3-server.sh build; it needs Go)",
            );
            return None;
        }
        let mut s = S3Server {
            dir: tempfile::tempdir().unwrap(),
            env: BTreeMap::new(),
        };
        s.launch();
        Some(s)
    }

    /// Starts the server, or restarts it on the same ports and data.
    pub fn launch(&mut self) {
        let out = Command::new(script())
            .arg("start")
            .arg(self.dir.path())
            .env("GVAULT_S3_PARENT_PID", std::process::id().to_string())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "s3-server.sh start failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        self.env = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
    }

    pub fn stop(&self) {
        let st = Command::new(script())
            .arg("stop")
            .arg(self.dir.path())
            .status()
            .unwrap();
        assert!(st.success());
    }

    pub fn var(&self, name: &str) -> &str {
        &self.env[name]
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = Command::new(script())
            .arg("stop")
            .arg(self.dir.path())
            .status();
    }
}
