//! The record and value codecs of the store commands: JSON-lines records
//! (`export`, `import`, `scan --json`, `get --json`) and the value
//! encodings of `put` and `get` (`--hex`, `--base64`).
//!
//! Self-contained on purpose (no `super::` or `crate::` paths): the fuzz
//! crate compiles this very file (`#[path]`, fuzz/src/cli.rs) to fuzz
//! `import`'s parser, since the CLI is a binary with no library to link.

use std::io::Write;

use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig, STANDARD};
use base64::engine::DecodePaddingMode;
use base64::Engine;
use gvault_store::{MAX_BATCH_BYTES, MAX_KEY_LEN};

/// Refuses a value the store would refuse (one write batch holds at most
/// `MAX_BATCH_BYTES`) before it is read: a 50 GB file would otherwise be
/// read into memory only to be refused.
pub fn check_value_len(len: u64, what: &str) -> Result<(), String> {
    if len > MAX_BATCH_BYTES as u64 {
        return Err(format!(
            "{what} exceeds {MAX_BATCH_BYTES} bytes (1 GiB), the most one value holds: store larger data in pieces under several keys"
        ));
    }
    Ok(())
}

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
