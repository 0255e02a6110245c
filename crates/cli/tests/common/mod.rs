//! Running the `gvault` binary from the command-line tests.
#![allow(dead_code)]

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

/// A command for the binary with the store in `store` and a clean
/// environment (no key source, no `GVAULT_WAIT`); stdin is empty, stdout
/// and stderr are captured.
pub fn command(store: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_gvault"));
    c.args(args)
        .env("GVAULT_STORE", store)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for v in [
        "GVAULT_KEY",
        "GVAULT_KEY_FILE",
        "GVAULT_PASSPHRASE",
        "GVAULT_WAIT",
    ] {
        c.env_remove(v);
    }
    c
}

/// Runs `c` to its end.
pub fn output(mut c: Command) -> Output {
    c.output()
        .expect("cargo builds the gvault binary for its tests")
}

/// Runs `c` with `input` on stdin, written from a thread: the child may
/// fill its stdout pipe before it has read all of stdin.
pub fn output_with_input(mut c: Command, input: &[u8]) -> Output {
    c.stdin(Stdio::piped());
    let mut child = c
        .spawn()
        .expect("cargo builds the gvault binary for its tests");
    let mut stdin = child.stdin.take().expect("stdin is piped");
    let data = input.to_vec();
    let feeder = std::thread::spawn(move || {
        let _ = stdin.write_all(&data);
    });
    let o = child.wait_with_output().expect("waiting for gvault");
    feeder.join().expect("stdin feeder thread");
    o
}

/// `gvault ARGS` on `store`.
pub fn gvault(store: &Path, args: &[&str]) -> Output {
    output(command(store, args))
}

/// [`gvault`] with `env` added to the clean environment.
pub fn gvault_env(store: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = command(store, args);
    for (k, v) in env {
        c.env(k, v);
    }
    output(c)
}

/// [`gvault`] with `input` on stdin.
pub fn gvault_stdin(store: &Path, args: &[&str], input: &[u8]) -> Output {
    output_with_input(command(store, args), input)
}

/// [`gvault`] with `input`, if any, on stdin.
pub fn gvault_input(store: &Path, args: &[&str], input: Option<&[u8]>) -> Output {
    match input {
        Some(data) => gvault_stdin(store, args, data),
        None => gvault(store, args),
    }
}

/// `gvault ARGS` for commands that open no store (benchmarks).
pub fn gvault_no_store(args: &[&str]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_gvault"));
    c.args(args);
    output(c)
}

/// The exit code; -1 for a process ended by a signal.
pub fn code(o: &Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Stdout then stderr, for messages that may be on either.
pub fn text(o: &Output) -> String {
    stdout(o) + &stderr(o)
}
