//! Targets for the `gvault` command's parsers: `import`'s JSON lines and
//! the value encodings of `put` (`--hex`, `--base64`).
//!
//! The CLI is a binary crate with no library, so the parsers' file is
//! compiled here as it is (`#[path]`): it holds the record and value codecs
//! only and names nothing else of the CLI. A `[lib]` target for the CLI
//! would do too, but would add a public library and build every CLI
//! dependency (clap, plotters, ...) into the instrumented fuzz driver for
//! one file of parsing.

#[path = "../../crates/cli/src/store_cmd/records/codec.rs"]
pub mod codec;

use codec::Encoding;

use crate::capped;

/// `gvault import`'s input: read line by line as `import` reads it (a line
/// that is not UTF-8 ends the import; blank lines are skipped), each line
/// through `parse_record`. A record that parses must be written by
/// `export`'s `write_record` as one line that parses back to the same key
/// and value.
pub fn cli_import(data: &[u8]) {
    for line in capped(data).split(|b| *b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Ok(line) = std::str::from_utf8(line) else {
            return;
        };
        if line.trim().is_empty() {
            continue;
        }
        let Ok((key, value)) = codec::parse_record(line) else {
            continue;
        };
        let mut out = Vec::new();
        codec::write_record(&mut out, &key, Some(&value)).expect("writing to memory");
        let text = std::str::from_utf8(&out).expect("a written record is UTF-8");
        let text = text.strip_suffix('\n').expect("a record ends its line");
        assert!(!text.contains('\n'), "a written record spans lines");
        assert_eq!(
            codec::parse_record(text),
            Ok((key, value)),
            "record round trip"
        );
    }
}

/// A value as `put` reads it: the first byte picks the encoding (raw, hex,
/// base64), the rest is the input. What decodes must encode (as `get`
/// prints it) and decode back to the same bytes.
pub fn cli_value(data: &[u8]) {
    let data = capped(data);
    let Some((&pick, input)) = data.split_first() else {
        return;
    };
    let enc = match pick % 3 {
        0 => Encoding::Raw,
        1 => Encoding::Hex,
        _ => Encoding::Base64,
    };
    assert!(input.len() as u64 <= enc.max_input_len());
    let Ok(value) = enc.decode(input.to_vec()) else {
        return;
    };
    let printed = enc.encode(&value);
    assert_eq!(
        enc.decode(printed).as_deref(),
        Ok(&value[..]),
        "value round trip ({})",
        enc.flag()
    );
}
