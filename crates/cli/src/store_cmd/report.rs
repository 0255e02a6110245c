//! `--json` forms of `stats`, `verify` and `keys status`: one JSON object
//! (pretty-printed) on stdout, with the same facts as the text form.

use std::path::Path;

use gvault_store::{KeyStatus, Stats, VerifyReport};
use serde_json::{json, Value};

pub fn stats(st: &Stats) -> Value {
    let levels: Vec<Value> = st
        .levels
        .iter()
        .enumerate()
        .map(|(level, (tables, bytes))| json!({"level": level, "tables": tables, "bytes": bytes}))
        .collect();
    json!({
        "last_sequence": st.last_sequence,
        "memtable_bytes": st.memtable_bytes,
        "immutable_memtables": st.immutable_memtables,
        "vlog_files": st.vlog_files,
        "vlog_bytes": st.vlog_bytes,
        "block_cache_bytes": st.block_cache_bytes,
        "live_snapshots": st.live_snapshots,
        "levels": levels,
    })
}

pub fn verify(r: &VerifyReport) -> Value {
    json!({
        "opened": true,
        "clean": r.is_clean(),
        "tables": r.tables,
        "table_blocks": r.table_blocks,
        "table_entries": r.table_entries,
        "vlog_files": r.vlog_files,
        "vlog_frames": r.vlog_frames,
        "live_keys": r.live_keys,
        "problems": r.problems.iter().map(|p| p.to_string()).collect::<Vec<_>>(),
    })
}

/// `verify --json` of a store too damaged to open.
pub fn verify_unopened(why: &str) -> Value {
    json!({"opened": false, "clean": false, "problems": [why]})
}

/// One row of `keys status`: a data key, its state and its live files.
pub struct KeyRow {
    /// `None` for the files sealed under no key (an index-only store's
    /// value log).
    pub id: Option<u32>,
    pub state: &'static str,
    pub files: usize,
    pub bytes: u64,
}

/// The rows `keys status` prints, text or JSON: every key, retired keys,
/// then unsealed files if any.
pub fn key_rows(dir: &Path, st: &KeyStatus) -> Vec<KeyRow> {
    let bytes_of = |files: &[String]| -> u64 {
        files
            .iter()
            .filter_map(|f| std::fs::metadata(dir.join(f)).ok())
            .map(|m| m.len())
            .sum()
    };
    let mut rows: Vec<KeyRow> = st
        .keys
        .iter()
        .map(|(id, files)| KeyRow {
            id: Some(*id),
            state: match (*id == st.current, files.is_empty()) {
                (true, _) => "current",
                (false, false) => "old",
                (false, true) => "unused",
            },
            files: files.len(),
            bytes: bytes_of(files),
        })
        .collect();
    rows.extend(st.retired.iter().map(|id| KeyRow {
        id: Some(*id),
        state: "retired",
        files: 0,
        bytes: 0,
    }));
    if !st.unsealed.is_empty() {
        rows.push(KeyRow {
            id: None,
            state: "crc32c",
            files: st.unsealed.len(),
            bytes: bytes_of(&st.unsealed),
        });
    }
    rows
}

pub fn key_status(dir: &Path, st: &KeyStatus) -> Value {
    let rows: Vec<Value> = key_rows(dir, st)
        .iter()
        .map(|r| json!({"id": r.id, "state": r.state, "files": r.files, "bytes": r.bytes}))
        .collect();
    json!({
        "current": st.current,
        "keys": rows,
        "stale_files": st.stale_files(),
        "index_only": !st.unsealed.is_empty(),
    })
}

/// Prints `v` pretty, with a newline, on stdout.
pub fn print(v: &Value) -> Result<(), Box<dyn std::error::Error>> {
    println!("{}", serde_json::to_string_pretty(v)?);
    Ok(())
}
