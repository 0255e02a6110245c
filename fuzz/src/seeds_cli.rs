//! Seeds for the CLI's parsers: JSON lines as `gvault export` writes them
//! (`write_record`: text and base64 fields), with the variants `import`
//! also reads (unpadded base64, CRLF line ends, blank lines), and values as
//! `gvault get --hex` / `--base64` print them.

use crate::cli::codec::{write_record, Encoding};
use crate::seeds::SeedWriter;

const RECORDS: &[(&[u8], &[u8])] = &[
    (b"user:1", b"{\"name\": \"Ada\"}"),
    (b"plain", b"text \"quoted\"\n\ttabs \xc3\xa9"),
    (b"\xff\xfe key", b"\x00\x01\x02\xff"),
    (b"k", b""),
    (b"", b"\x80"),
];

pub fn cli(w: &mut SeedWriter) {
    let mut export = Vec::new();
    for (k, v) in RECORDS {
        write_record(&mut export, k, Some(v)).expect("writing to memory");
    }
    w.add("cli_import", &export);
    for (k, v) in RECORDS {
        let mut one = Vec::new();
        write_record(&mut one, k, Some(v)).expect("writing to memory");
        w.add("cli_import", &one);
    }
    w.add(
        "cli_import",
        b"{\"key_b64\": \"YQ\", \"value\": \"x\"}\r\n\r\n{\"key\": \"b\", \"value_b64\": \"AAEC/w==\"}\n",
    );
    for (pick, enc) in [Encoding::Raw, Encoding::Hex, Encoding::Base64]
        .into_iter()
        .enumerate()
    {
        for (_, v) in RECORDS {
            let mut input = vec![pick as u8];
            input.extend_from_slice(&enc.encode(v));
            w.add("cli_value", &input);
        }
    }
    w.add("cli_value", b"\x02aGVs\nbG8=\n");
    w.add("cli_value", b"\x01 01 ab\n");
}
