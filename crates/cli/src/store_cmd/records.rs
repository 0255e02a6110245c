//! Records as JSON lines (`export`, `import`, `scan --json`, `get --json`)
//! and the value encodings of `put` and `get` (`--hex`, `--base64`).
//!
//! One record is one JSON object on one line. A key or value that is valid
//! UTF-8 is a JSON string under `"key"` / `"value"`; any other bytes are
//! base64 (standard alphabet, padded) under `"key_b64"` / `"value_b64"`.
//! `import` reads both forms, so `export` output imports back bit for bit.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;

use gvault_store::{WriteBatch, WriteOptions};

use super::{open_existing, open_reader, CmdResult, KeyRange, StoreDir};
use crate::progress;

mod codec;
pub use codec::{check_value_len, parse_record, write_record, Encoding};

/// `gvault export`: every record in [from, to) as JSON lines on stdout, in
/// key order, from one consistent view of the store.
pub fn export(store: &StoreDir, range: &KeyRange) -> CmdResult {
    range.check()?;
    let s = open_reader(store)?;
    let pb = progress::spinner("exporting");
    let scan = range.scan(&s, false)?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut n = 0u64;
    for item in scan {
        let (k, v) = item?;
        write_record(&mut out, &k, Some(&v))?;
        n += 1;
        if n.is_multiple_of(4096) {
            pb.set_message(format!("exporting: {n} records"));
        }
    }
    out.flush()?;
    pb.finish_and_clear();
    s.close()?;
    Ok(0)
}

/// `gvault salvage`: every record that authenticates, as JSON lines on
/// stdout; the report on stderr; exit 3 if anything could not be read.
pub fn salvage(store: &StoreDir, json: bool) -> CmdResult {
    let dir = store.path()?;
    let opts = gvault_store::Options {
        lock_timeout: store.wait()?,
        ..store.keys.options(&dir)?
    };
    let pb = progress::spinner("salvaging");
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let report = gvault_store::salvage(&dir, &opts, &mut |k: &[u8], v: &[u8]| {
        write_record(&mut out, k, Some(v))
    })?;
    out.flush()?;
    pb.finish_and_clear();
    if json {
        let problems: Vec<String> = report.problems.iter().map(|p| p.to_string()).collect();
        let obj = serde_json::json!({
            "records": report.records,
            "tables": report.tables,
            "table_blocks": report.table_blocks,
            "log_files": report.log_files,
            "log_frames": report.log_frames,
            "from_manifest": report.from_manifest,
            "clean": report.is_clean(),
            "problems": problems,
            "notes": report.notes,
        });
        eprintln!("{obj}");
    } else {
        eprintln!("{report}");
    }
    Ok(if report.is_clean() {
        0
    } else {
        super::EXIT_DAMAGED
    })
}

/// The size of stdin when it is a regular file (`gvault import < f`).
#[cfg(unix)]
fn stdin_len() -> Option<u64> {
    use std::os::fd::AsFd;
    let fd = std::io::stdin().as_fd().try_clone_to_owned().ok()?;
    let m = std::fs::File::from(fd).metadata().ok()?;
    m.is_file().then_some(m.len())
}

#[cfg(not(unix))]
fn stdin_len() -> Option<u64> {
    None
}

/// A batch is written once it holds this many bytes.
const IMPORT_BATCH_BYTES: usize = 1 << 20;

/// `gvault import`: JSON lines from `file` or stdin, in batches of about a
/// megabyte; progress (bytes read, rate, time left when the size is known)
/// on a terminal.
pub fn import(store: &StoreDir, file: Option<&Path>) -> CmdResult {
    let (input, total): (Box<dyn Read>, Option<u64>) = match file {
        Some(f) => {
            let h =
                std::fs::File::open(f).map_err(|e| format!("cannot open {}: {e}", f.display()))?;
            let len = h.metadata().ok().filter(|m| m.is_file()).map(|m| m.len());
            (Box::new(h), len)
        }
        None => (Box::new(std::io::stdin()), stdin_len()),
    };
    let s = open_existing(store)?;
    let pb = progress::bytes("importing", total);
    let input = BufReader::with_capacity(1 << 16, pb.wrap_read(input));
    let mut batch = WriteBatch::new();
    let mut count = 0u64;
    // Records in batches already written: an import is not one transaction
    // (it is written a megabyte at a time), so an error says how far it got.
    let mut written = 0u64;
    let so_far = |written: u64| {
        if written == 0 {
            "nothing was imported".to_string()
        } else {
            format!("the first {written} records were imported (importing the file again is safe: a key's value is replaced)")
        }
    };
    let result = (|| -> CmdResult {
        for (i, line) in input.lines().enumerate() {
            let line =
                line.map_err(|e| format!("reading line {}: {e}; {}", i + 1, so_far(written)))?;
            if line.trim().is_empty() {
                continue;
            }
            let (key, value) = parse_record(&line)
                .map_err(|e| format!("line {}: {e}; {}", i + 1, so_far(written)))?;
            // A large record goes in a batch of its own rather than push
            // the pending one past the store's batch limit.
            if !batch.is_empty()
                && batch.approximate_bytes() + key.len() + value.len() >= IMPORT_BATCH_BYTES
            {
                s.write(&WriteOptions::default(), std::mem::take(&mut batch))?;
                written = count;
            }
            batch.put(key, value);
            count += 1;
        }
        s.write(&WriteOptions::SYNC, std::mem::take(&mut batch))?;
        Ok(0)
    })();
    pb.finish_and_clear();
    result?;
    s.close()?;
    println!("imported {count} records");
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_text_and_bytes() {
        let cases: [(&[u8], &[u8]); 4] = [
            (b"plain", b"text \"quoted\"\n\ttabs \xc3\xa9"),
            (b"\xff\xfe key", b"\x00\x01\x02\xff"),
            (b"k", b""),
            (b"", b"\x80"),
        ];
        for (k, v) in cases {
            let mut line = Vec::new();
            write_record(&mut line, k, Some(v)).unwrap();
            assert_eq!(line.last(), Some(&b'\n'));
            let text = String::from_utf8(line).unwrap();
            assert_eq!(text.matches('\n').count(), 1, "{text}");
            let json: serde_json::Value = serde_json::from_str(&text).unwrap();
            let text_key = std::str::from_utf8(k).is_ok();
            assert_eq!(json.get("key").is_some(), text_key, "{text}");
            assert_eq!(json.get("key_b64").is_some(), !text_key, "{text}");
            assert_eq!(parse_record(&text).unwrap(), (k.to_vec(), v.to_vec()));
        }
    }

    #[test]
    fn bad_records_are_refused_with_the_reason() {
        for (line, why) in [
            (r#"{"key": "a"}"#, "no \"value\""),
            (r#"{"value": "a"}"#, "no \"key\""),
            (r#"{"key": "a", "key_b64": "YQ==", "value": ""}"#, "both"),
            (r#"{"key_b64": "@@", "value": ""}"#, "not base64"),
            (r#"{"key": 1, "value": ""}"#, "invalid type"),
        ] {
            let e = parse_record(line).unwrap_err();
            assert!(e.contains(why), "{line}: {e}");
        }
        // Unpadded base64 is read too.
        assert_eq!(
            parse_record(r#"{"key_b64": "YQ", "value": "x"}"#).unwrap(),
            (b"a".to_vec(), b"x".to_vec())
        );
    }

    #[test]
    fn value_encodings() {
        let v = b"\x00hello\xff";
        for enc in [Encoding::Raw, Encoding::Hex, Encoding::Base64] {
            let text = enc.encode(v);
            assert_eq!(enc.decode(text).unwrap(), v, "{enc:?}");
        }
        assert_eq!(Encoding::Hex.encode(b"\x01\xab"), b"01ab\n");
        assert_eq!(
            Encoding::Hex.decode(b" 01 ab\n".to_vec()).unwrap(),
            b"\x01\xab"
        );
        assert_eq!(
            Encoding::Base64.decode(b"aGVs\nbG8=\n".to_vec()).unwrap(),
            b"hello"
        );
        assert!(Encoding::Hex
            .decode(b"0g".to_vec())
            .unwrap_err()
            .contains("--hex"));
        assert!(Encoding::Base64
            .decode(b"!!".to_vec())
            .unwrap_err()
            .contains("--base64"));
    }
}
