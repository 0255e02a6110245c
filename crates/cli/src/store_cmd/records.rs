//! Records as JSON lines (`export`, `import`, `scan --json`, `get --json`)
//! and the value encodings of `put` and `get` (`--hex`, `--base64`).
//!
//! One record is one JSON object on one line. A key or value that is valid
//! UTF-8 is a JSON string under `"key"` / `"value"`; any other bytes are
//! base64 (standard alphabet, padded) under `"key_b64"` / `"value_b64"`.
//! `import` reads both forms, so `export` output imports back bit for bit.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;

use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig, STANDARD};
use base64::engine::DecodePaddingMode;
use base64::Engine;
use gvault_store::{WriteBatch, WriteOptions, MAX_BATCH_BYTES, MAX_KEY_LEN};

use super::{check_value_len, open_existing, open_reader, CmdResult, KeyRange, StoreDir};
use crate::progress;

/// Standard-alphabet base64 that accepts input with or without padding.
const B64_DECODE: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// How `put` reads a value and `get` prints one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    /// The bytes as they are.
    Raw,
    /// Hexadecimal, two digits a byte.
    Hex,
    /// Base64, standard alphabet.
    Base64,
}

impl Encoding {
    pub fn from_flags(hex: bool, base64: bool) -> Self {
        match (hex, base64) {
            (true, _) => Self::Hex,
            (_, true) => Self::Base64,
            _ => Self::Raw,
        }
    }

    /// The flag that selects this encoding.
    pub fn flag(self) -> &'static str {
        match self {
            Self::Raw => "",
            Self::Hex => "--hex",
            Self::Base64 => "--base64",
        }
    }

    /// The most input bytes `put` reads for one value in this encoding: the
    /// encoded form of the largest value, with room for line breaks.
    pub fn max_input_len(self) -> u64 {
        let max = MAX_BATCH_BYTES as u64;
        match self {
            Self::Raw => max,
            Self::Hex => 2 * max + max / 16,
            Self::Base64 => max.div_ceil(3) * 4 + max / 16,
        }
    }

    /// The value `put` stores for `input`. Whitespace (line breaks of
    /// `base64`, a trailing newline from `echo`) is ignored in encoded input.
    pub fn decode(self, input: Vec<u8>) -> Result<Vec<u8>, String> {
        if self == Self::Raw {
            return Ok(input);
        }
        let text: Vec<u8> = input
            .into_iter()
            .filter(|b| !b.is_ascii_whitespace())
            .collect();
        let r = match self {
            Self::Hex => hex::decode(&text).map_err(|e| e.to_string()),
            _ => B64_DECODE.decode(&text).map_err(|e| e.to_string()),
        };
        r.map_err(|e| format!("{}: the value is not valid: {e}", self.flag()))
    }

    /// What `get` prints for `value`: the raw bytes, or the encoded text
    /// and a newline.
    pub fn encode(self, value: &[u8]) -> Vec<u8> {
        let mut text = match self {
            Self::Raw => return value.to_vec(),
            Self::Hex => hex::encode(value),
            Self::Base64 => STANDARD.encode(value),
        }
        .into_bytes();
        text.push(b'\n');
        text
    }
}

/// One record as written: each field a string when its bytes are UTF-8.
#[derive(serde::Serialize)]
struct RecordOut<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    key: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    key_b64: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    value: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    value_b64: Option<String>,
}

/// Text or base64: the field pair one byte string is written into.
fn split(bytes: &[u8]) -> (Option<&str>, Option<String>) {
    match std::str::from_utf8(bytes) {
        Ok(s) => (Some(s), None),
        Err(_) => (None, Some(STANDARD.encode(bytes))),
    }
}

/// Writes one record and a newline; `value` `None` writes the key alone
/// (`scan --keys-only --json`).
pub fn write_record(out: &mut impl Write, key: &[u8], value: Option<&[u8]>) -> std::io::Result<()> {
    let (key, key_b64) = split(key);
    let (value, value_b64) = value.map_or((None, None), split);
    let rec = RecordOut {
        key,
        key_b64,
        value,
        value_b64,
    };
    serde_json::to_writer(&mut *out, &rec)?;
    out.write_all(b"\n")
}

/// One record as read: exactly one of each pair.
#[derive(serde::Deserialize)]
struct RecordIn {
    key: Option<String>,
    key_b64: Option<String>,
    value: Option<String>,
    value_b64: Option<String>,
}

const RECORD_SHAPE: &str =
    "expected {\"key\": ..., \"value\": ...} (\"key_b64\" / \"value_b64\" for base64 bytes)";

fn field(text: Option<String>, b64: Option<String>, name: &str) -> Result<Vec<u8>, String> {
    match (text, b64) {
        (Some(t), None) => Ok(t.into_bytes()),
        (None, Some(b)) => B64_DECODE
            .decode(b.as_bytes())
            .map_err(|e| format!("\"{name}_b64\" is not base64: {e}")),
        (Some(_), Some(_)) => Err(format!("both \"{name}\" and \"{name}_b64\"")),
        (None, None) => Err(format!("no \"{name}\" or \"{name}_b64\"")),
    }
}

/// The key and value of one JSON line.
pub fn parse_record(line: &str) -> Result<(Vec<u8>, Vec<u8>), String> {
    let r: RecordIn = serde_json::from_str(line).map_err(|e| format!("{RECORD_SHAPE}: {e}"))?;
    let key = field(r.key, r.key_b64, "key").map_err(|e| format!("{RECORD_SHAPE}: {e}"))?;
    let value = field(r.value, r.value_b64, "value").map_err(|e| format!("{RECORD_SHAPE}: {e}"))?;
    if key.len() > MAX_KEY_LEN {
        return Err(format!(
            "a key of {} bytes: keys hold at most {MAX_KEY_LEN} bytes (1 MiB)",
            key.len()
        ));
    }
    check_value_len(value.len() as u64, "the value")?;
    Ok((key, value))
}

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
