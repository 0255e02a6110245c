//! `gvault bench lsm --reencrypt GiB`: the re-encryption pass after a data
//! key rotation against a sequential copy of as many bytes on the same
//! filesystem (read one file, write another, fsync), measured in one run.

use std::io::{Read, Write};
use std::path::Path;
use std::time::Instant;

use gvault_store::{Options, Store, WriteBatch, WriteOptions};
use serde::Serialize;

use super::data::{dir_bytes, settle, Keys, Values};
use super::encrypt::{Backends, Encrypt};

/// Large values: the store's bytes sit mostly in the value log, as in a
/// store of files rather than of small records.
const VALUE_BYTES: usize = 64 << 10;
const CHUNK: usize = 4 << 20;

#[derive(Serialize)]
pub struct ReencryptRow {
    pub encrypt: &'static str,
    pub store_bytes: u64,
    pub entries: u64,
    pub copy_seconds: f64,
    /// Bytes copied per second (MB = 10^6 bytes), each byte read and written once.
    pub copy_mb_per_sec: f64,
    pub reencrypt_seconds: f64,
    /// Store bytes re-encrypted per second.
    pub reencrypt_mb_per_sec: f64,
    /// Re-encryption over copy speed (the target: at least 0.8).
    pub ratio_to_copy: f64,
    pub tables_rewritten: u64,
    pub logs_rewritten: u64,
    pub keys_retired: Vec<u32>,
}

/// Seconds to copy a `bytes`-byte file to a new one and fsync it.
fn copy_seconds(base: &Path, bytes: u64) -> Result<f64, String> {
    let src = base.join("copy-source");
    let dst = base.join("copy-target");
    let io = |what: &str, e: std::io::Error| format!("{what}: {e}");
    {
        let mut f = std::fs::File::create(&src).map_err(|e| io("creating the copy source", e))?;
        let chunk: Vec<u8> = (0..CHUNK)
            .map(|i| ((i as u64 * 2_654_435_761) >> 13) as u8)
            .collect();
        let mut left = bytes;
        while left > 0 {
            let n = left.min(CHUNK as u64) as usize;
            f.write_all(&chunk[..n])
                .map_err(|e| io("writing the copy source", e))?;
            left -= n as u64;
        }
        f.sync_all().map_err(|e| io("syncing the copy source", e))?;
    }
    let start = Instant::now();
    let mut r = std::fs::File::open(&src).map_err(|e| io("opening the copy source", e))?;
    let mut w = std::fs::File::create(&dst).map_err(|e| io("creating the copy target", e))?;
    let mut buf = vec![0u8; CHUNK];
    loop {
        let n = r.read(&mut buf).map_err(|e| io("reading", e))?;
        if n == 0 {
            break;
        }
        w.write_all(&buf[..n]).map_err(|e| io("writing", e))?;
    }
    w.sync_all().map_err(|e| io("syncing the copy target", e))?;
    let secs = start.elapsed().as_secs_f64();
    let _ = std::fs::remove_file(&src);
    let _ = std::fs::remove_file(&dst);
    Ok(secs)
}

pub fn run(
    base: &Path,
    gib: f64,
    mode: Encrypt,
    backends: &Backends,
) -> Result<ReencryptRow, String> {
    let target = (gib * (1u64 << 30) as f64) as u64;
    let entries = (target / (16 + VALUE_BYTES) as u64).max(1);
    let dir = base.join("reencrypt");
    let store = Store::open(
        &dir,
        Options {
            reencrypt_bytes_per_sec: u64::MAX,
            ..backends.options(mode)
        },
    )
    .map_err(|e| format!("opening a store in {}: {e}", dir.display()))?;
    let result = measure(&store, base, &dir, entries, mode);
    let closed = store.close().map_err(|e| format!("closing the store: {e}"));
    let removed =
        std::fs::remove_dir_all(&dir).map_err(|e| format!("removing {}: {e}", dir.display()));
    let row = result?;
    closed?;
    removed?;
    Ok(row)
}

fn measure(
    store: &Store,
    base: &Path,
    dir: &Path,
    entries: u64,
    mode: Encrypt,
) -> Result<ReencryptRow, String> {
    let keys = Keys::Decimal16;
    let mut values = Values::new(VALUE_BYTES)?;
    let mut batch = WriteBatch::new();
    for i in 0..entries {
        batch.put(keys.key(i), values.make(i, 0));
        if batch.approximate_bytes() >= CHUNK {
            store
                .write(&WriteOptions::default(), std::mem::take(&mut batch))
                .map_err(|e| format!("fill: {e}"))?;
        }
    }
    store
        .write(&WriteOptions::SYNC, batch)
        .map_err(|e| format!("fill: {e}"))?;
    settle(store)?;
    let store_bytes = dir_bytes(dir)?;
    let copy = copy_seconds(base, store_bytes)?;

    let old = store.key_status().map_err(|e| e.to_string())?.current;
    store
        .rotate_data_key()
        .map_err(|e| format!("rotate: {e}"))?;
    let start = Instant::now();
    let report = store.reencrypt().map_err(|e| format!("reencrypt: {e}"))?;
    let secs = start.elapsed().as_secs_f64().max(1e-9);
    let status = store.key_status().map_err(|e| e.to_string())?;
    if status.stale_files() != 0 || !report.keys_retired.contains(&old) {
        return Err(format!(
            "the pass left {} files under older keys (retired {:?})",
            status.stale_files(),
            report.keys_retired
        ));
    }
    // Spot-check values across the key range under the new key.
    for i in (0..entries).step_by((entries / 64).max(1) as usize) {
        let v = store
            .get(keys.key(i))
            .map_err(|e| format!("get after reencrypt: {e}"))?
            .ok_or_else(|| format!("key index {i} lost by the re-encryption pass"))?;
        values.check(i, &v)?;
    }
    let copy_mb = store_bytes as f64 / copy.max(1e-9) / 1e6;
    let re_mb = store_bytes as f64 / secs / 1e6;
    Ok(ReencryptRow {
        encrypt: mode.name(),
        store_bytes,
        entries,
        copy_seconds: copy,
        copy_mb_per_sec: copy_mb,
        reencrypt_seconds: secs,
        reencrypt_mb_per_sec: re_mb,
        ratio_to_copy: re_mb / copy_mb,
        tables_rewritten: report.tables_rewritten,
        logs_rewritten: report.logs_rewritten,
        keys_retired: report.keys_retired,
    })
}
