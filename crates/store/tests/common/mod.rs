//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::sync::{Arc, Mutex};

use gvault_store::Options;

/// Options with tiny sizes, so a few thousand writes exercise flushes,
/// compactions and value-log rotation.
pub fn small_options() -> Options {
    Options {
        write_buffer_size: 16 << 10,
        value_threshold: 100,
        block_size: 256,
        table_file_size: 8 << 10,
        level1_max_bytes: 32 << 10,
        l0_compaction_trigger: 2,
        l0_stop_writes_trigger: 8,
        vlog_file_size: 64 << 10,
        block_cache_bytes: 64 << 10,
        ..Options::default()
    }
}

/// Options whose warnings are collected instead of printed.
pub fn capturing(mut opts: Options) -> (Options, Arc<Mutex<Vec<String>>>) {
    let warnings = Arc::new(Mutex::new(Vec::new()));
    let w = warnings.clone();
    opts.warning_sink = Arc::new(move |m: &str| w.lock().unwrap().push(m.to_owned()));
    (opts, warnings)
}

/// The store's value-log files, in file-number order.
pub fn vlog_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut v: Vec<std::path::PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "vlog"))
        .collect();
    v.sort();
    v
}

pub fn value_for(key: u64, version: u64, len: usize) -> Vec<u8> {
    let mut v = format!("{key}:{version}:").into_bytes();
    let mut x = key.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ version;
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.push(b'a' + (x % 26) as u8);
    }
    v.truncate(len.max(1));
    v
}

/// Whether a suite runs on an unencrypted or an encrypted store, or on an
/// index-only one (value log under CRC32C).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Plain,
    Encrypted,
    IndexOnly,
}

pub const TEST_KEY_HEX: &str = "5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a";

impl Mode {
    pub fn encryption(self) -> Option<gvault_store::Encryption> {
        match self {
            Mode::Plain => None,
            Mode::Encrypted => Some(gvault_store::Encryption::with_key(
                gvault_store::keys::parse_hex_key(TEST_KEY_HEX).unwrap(),
            )),
            Mode::IndexOnly => Some(gvault_store::Encryption {
                seal_value_log: Some(false),
                ..Mode::Encrypted.encryption().unwrap()
            }),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Mode::Plain => "plain",
            Mode::Encrypted => "encrypted",
            Mode::IndexOnly => "index-only",
        }
    }

    pub fn from_name(name: &str) -> Option<Mode> {
        [Mode::Plain, Mode::Encrypted, Mode::IndexOnly]
            .into_iter()
            .find(|m| m.name() == name)
    }

    /// `small_options` in this mode.
    pub fn options(self) -> Options {
        Options {
            encryption: self.encryption(),
            ..small_options()
        }
    }
}

/// Runs a test body once per mode, as two tests `plain` and `encrypted`.
#[macro_export]
macro_rules! both_modes {
    ($name:ident, $body:ident) => {
        mod $name {
            #[test]
            fn plain() {
                super::$body(super::common::Mode::Plain)
            }
            #[test]
            fn encrypted() {
                super::$body(super::common::Mode::Encrypted)
            }
        }
    };
}
