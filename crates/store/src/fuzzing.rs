//! Entry points for the fuzz targets in `fuzz/` (feature `fuzzing`, which
//! no shipped build turns on). Each takes the bytes of one file or payload,
//! makes its checksums valid where the format has them (so a fuzzer gets
//! past the CRC32C to the decoder behind it), and runs the decoder the store
//! itself runs on open or read, in plain (unencrypted) mode. What they
//! return is the decoder's verdict; the bugs a fuzzer looks for are panics,
//! hangs and runaway allocations, and the round-trip checks here panic when
//! decode(encode(x)) != x.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use crate::block::{Block, BlockBuilder, BlockIterator};
use crate::cache::BlockCache;
use crate::codec::{BlockCodec, BlockContext, BlockKind, Crc32cCodec, SealSlot};
use crate::coding::Decoder;
use crate::dir_lock::Access;
use crate::error::Result;
use crate::format::{
    manifest_path, table_path, vlog_path, BlockHandle, LogPosition, HEADER_LEN, POINTER_FILE,
};
use crate::iterator::InternalIterator;
use crate::log_writer::FRAME_HEADER_LEN;
use crate::memtable::MemTable;
use crate::table_builder::{FOOTER_BLOCK, FOOTER_PAYLOAD_LEN};
use crate::table_reader::{Table, TableIterator};
use crate::version::{LogMeta, Version, VersionEdit};
use crate::write_batch::{decode_commit, decode_value_frame, CommitBuilder};
use crate::{MemFs, Options};

/// Where the targets put their one file.
const DIR: &str = "/fuzz";

fn read_u32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// Rewrites the file header's CRC; returns (key id, file number) as the
/// header says them (0, 0 for a file too short to have a header).
pub fn fix_header(file: &mut [u8]) -> (u32, u64) {
    if file.len() < HEADER_LEN {
        return (0, 0);
    }
    let crc = crc32c::crc32c(&file[..20]);
    file[20..24].copy_from_slice(&crc.to_le_bytes());
    let key_id = read_u32(file, 8).expect("in header");
    let number = u64::from_le_bytes(file[12..20].try_into().expect("in header"));
    (key_id, number)
}

/// Seals `file[start..start+len]` in place under the plain codec, if it
/// lies inside the file.
fn fix_block(file: &mut [u8], ctx: BlockContext, start: u64, len: u64) {
    let (Ok(start), Ok(len)) = (usize::try_from(start), usize::try_from(len)) else {
        return;
    };
    let Some(block) = start
        .checked_add(len)
        .and_then(|end| file.get_mut(start..end))
    else {
        return;
    };
    if block.len() < Crc32cCodec.overhead_len() {
        return;
    }
    let _ = Crc32cCodec.seal_slots(&mut [SealSlot { ctx, block }]);
}

/// Makes every checksum of a value-log, manifest or pointer file valid:
/// the header's, then each frame's seal, frame by frame from the header on.
/// A pointer file's one frame carries `POINTER_BLOCK`; frames carry their
/// block number themselves, so the walk reads it from each frame. Returns
/// the file number the header names.
pub fn fix_log_checksums(file: &mut [u8]) -> u64 {
    let (key_id, file_number) = fix_header(file);
    let mut offset = HEADER_LEN;
    while offset + FRAME_HEADER_LEN <= file.len() {
        let len = read_u32(file, offset).expect("in bounds") as usize;
        let block_number = read_u32(file, offset + 4).expect("in bounds");
        let Some(kind) = BlockKind::from_u8(file[offset + 8]) else {
            return file_number;
        };
        let ctx = BlockContext {
            key_id,
            file_number,
            block_number,
            offset: offset as u64,
            kind,
        };
        let body = offset + FRAME_HEADER_LEN;
        fix_block(file, ctx, body as u64, len as u64);
        offset = match body.checked_add(len) {
            Some(next) => next,
            None => return file_number,
        };
    }
    file_number
}

fn handle_at(d: &mut Decoder<'_>) -> Option<BlockHandle> {
    Some(BlockHandle {
        offset: d.u64()?,
        len: d.u32()?,
        block: d.u32()?,
    })
}

/// Makes every checksum of a table valid: header, footer, then the filter
/// and index blocks the footer names, then each data block the index names.
/// Returns the file number the header names.
pub fn fix_table_checksums(file: &mut [u8]) -> u64 {
    let (key_id, file_number) = fix_header(file);
    let footer_len = FOOTER_PAYLOAD_LEN + Crc32cCodec.overhead_len();
    let Some(footer_at) = file.len().checked_sub(footer_len) else {
        return file_number;
    };
    let ctx = |block_number, offset, kind| BlockContext {
        key_id,
        file_number,
        block_number,
        offset,
        kind,
    };
    fix_block(
        file,
        ctx(FOOTER_BLOCK, footer_at as u64, BlockKind::Footer),
        footer_at as u64,
        footer_len as u64,
    );
    let mut d = Decoder::new(&file[footer_at..footer_at + FOOTER_PAYLOAD_LEN]);
    let (Some(index_h), Some(filter_h)) = (handle_at(&mut d), handle_at(&mut d)) else {
        return file_number;
    };
    for (h, kind) in [(filter_h, BlockKind::Filter), (index_h, BlockKind::Index)] {
        fix_block(
            file,
            ctx(h.block, h.offset, kind),
            h.offset,
            u64::from(h.len),
        );
    }
    let index_payload = usize::try_from(index_h.offset).ok().and_then(|s| {
        let end = s.checked_add((index_h.len as usize).checked_sub(4)?)?;
        file.get(s..end)
    });
    let Some(Ok(index)) = index_payload.map(|p| Block::decode(p.to_vec())) else {
        return file_number;
    };
    for i in 0..index.len() {
        if let Some(h) = BlockHandle::decode_from(&mut Decoder::new(index.value(i))) {
            fix_block(
                file,
                ctx(h.block, h.offset, BlockKind::Data),
                h.offset,
                u64::from(h.len),
            );
        }
    }
    file_number
}

/// Plain options on the in-memory file system; warnings (a torn tail
/// skipped) are dropped rather than printed on every run.
fn options(fs: &MemFs) -> Options {
    Options {
        fs: Arc::new(fs.clone()),
        warning_sink: Arc::new(|_: &str| {}),
        crypto_backend: None,
        ..Options::default()
    }
}

fn plain() -> Arc<dyn BlockCodec> {
    Arc::new(Crc32cCodec)
}

/// Upper bound on iterator steps, so a malformed table cannot loop forever
/// (a real table has one entry per step, fewer than its bytes).
fn step_budget(file_len: usize) -> usize {
    file_len + 16
}

/// A table file: opened as the store opens one, verified, walked in both
/// directions, and sought to each index key. Returns the entries seen.
pub fn table(mut file: Vec<u8>) -> Result<u64> {
    let number = fix_table_checksums(&mut file);
    let path = table_path(Path::new(DIR), number);
    let size = file.len() as u64;
    let budget = step_budget(file.len());
    let fs = MemFs::with_file(&path, file);
    let cache = Arc::new(BlockCache::new(1 << 20));
    let t = Arc::new(Table::open(&fs, &path, number, size, plain(), cache)?);
    let verified = t.verify();
    let mut it = TableIterator::new(t.clone());
    let mut seen = 0u64;
    it.seek_to_first();
    while it.valid() && (seen as usize) < budget {
        let _ = t.may_contain(it.key());
        seen += 1;
        it.next();
    }
    it.status()?;
    it.seek_to_last();
    let mut back = 0usize;
    while it.valid() && back < budget {
        back += 1;
        it.prev();
    }
    it.status()?;
    for i in 0..t.data_blocks() {
        let key = t.last_key_of_block(i).to_vec();
        let _ = t.seek_entry(&key)?;
    }
    verified?;
    Ok(seen)
}

/// One block's payload, as tables hold them: decoded, walked both ways,
/// sought to each of its keys, and rebuilt: the rebuilt block must decode to
/// the same entries.
pub fn block(payload: &[u8]) -> std::result::Result<usize, String> {
    let b = Arc::new(Block::decode(payload.to_vec())?);
    for i in 0..b.len() {
        let at = b.seek(b.key(i));
        assert!(
            at <= b.len(),
            "seek past the end of a block of {} entries",
            b.len()
        );
    }
    let mut it = BlockIterator::new(b.clone());
    it.seek_to_last();
    let mut back = 0;
    while it.valid() {
        back += 1;
        it.prev();
    }
    assert_eq!(back, b.len(), "walking back saw a different count");
    let mut builder = BlockBuilder::new(16);
    for i in 0..b.len() {
        builder.add(b.key(i), b.value(i));
    }
    let again = Block::decode(builder.finish()).expect("a rebuilt block decodes");
    assert_eq!(again.len(), b.len());
    for i in 0..b.len() {
        assert_eq!(again.key(i), b.key(i));
        assert_eq!(again.value(i), b.value(i));
    }
    Ok(b.len())
}

/// A manifest, recovered as an open does: frames read, edits decoded and
/// applied in order, a torn tail told from damage.
pub fn manifest(mut file: Vec<u8>) -> Result<Version> {
    let number = fix_log_checksums(&mut file);
    let dir = Path::new(DIR);
    let fs = MemFs::with_file(&manifest_path(dir, number), file);
    let opts = options(&fs);
    crate::manifest::recover(&fs, dir, number, plain(), &opts).map(|r| r.version)
}

/// The pointer file (`CURRENT`), read as an open does.
pub fn pointer(mut file: Vec<u8>) -> Result<Option<u64>> {
    fix_log_checksums(&mut file);
    let dir = Path::new(DIR);
    let fs = MemFs::with_file(&dir.join(POINTER_FILE), file);
    crate::manifest::read_pointer(&fs, dir, plain())
}

/// A value-log file, replayed into a memtable as an open replays the head
/// file (read-only: a torn tail is reported, not cut).
pub fn value_log(mut file: Vec<u8>) -> Result<()> {
    let number = fix_log_checksums(&mut file);
    let dir = Path::new(DIR);
    let fs = MemFs::with_file(&vlog_path(dir, number), file);
    let opts = options(&fs);
    let version = Version {
        logs: BTreeMap::from([(
            number,
            LogMeta {
                number,
                sealed: None,
            },
        )]),
        replay: LogPosition {
            file: number,
            offset: HEADER_LEN as u64,
            block: 0,
        },
        ..Version::default()
    };
    let mem = MemTable::new();
    crate::recovery::replay(&opts, dir, &version, &mem, plain(), Access::ReadOnly).map(|_| ())
}

/// A commit frame's payload (and, read as one, a value frame's): decoded;
/// what decodes must survive encode then decode unchanged.
pub fn commit_payload(payload: &[u8]) -> bool {
    let _ = decode_value_frame(payload);
    let Some(records) = decode_commit(payload) else {
        return false;
    };
    let mut c = CommitBuilder::appending_to(Vec::new());
    for r in &records {
        // One batch per record: the encoding of a batch is its first
        // sequence number and count, which any split reproduces.
        c.start_batch(r.seq, 1);
        match (r.value_type, r.frame) {
            (crate::format::ValueType::Inline, _) => c.inline(r.key, r.value),
            (crate::format::ValueType::Deletion, _) => c.delete(r.key),
            (crate::format::ValueType::Pointer, Some(f)) => c.pointer(r.key, f),
            (crate::format::ValueType::Pointer, None) => {
                panic!("a pointer record decoded without its frame")
            }
        }
    }
    let encoded = c.finish();
    let again = decode_commit(&encoded).expect("an encoded commit decodes");
    assert_eq!(again.len(), records.len());
    for (a, b) in again.iter().zip(&records) {
        assert_eq!(
            (a.seq, a.value_type, a.key, a.value, a.frame),
            (b.seq, b.value_type, b.key, b.value, b.frame)
        );
    }
    true
}

/// One manifest record's payload: decoded, re-encoded and decoded to the
/// same edit, then applied to an empty version.
pub fn version_edit(payload: &[u8]) -> bool {
    let Some(edit) = VersionEdit::decode(payload) else {
        return false;
    };
    let again = VersionEdit::decode(&edit.encode()).expect("an encoded edit decodes");
    assert_eq!(again, edit, "version edit changed in a round trip");
    let _ = Version::default().apply(&edit);
    true
}

/// The master key the `key_registry` target seals bodies under.
pub const FUZZ_MASTER: [u8; 32] = [7; 32];

/// The key registry (`KEYS`): the input is its cleartext header and body;
/// the body is sealed under a fixed raw master key with the header as
/// associated data and the header's nonce (so the fuzzer reaches the body
/// decoder past the GCM tag), then loaded as an open loads it. A header of
/// the passphrase kind is loaded with a passphrase when its Argon2 costs are
/// small enough to run per input (so parameter checks and derivation run),
/// with the raw key otherwise; either way it must be refused, since its
/// body was sealed under the raw key.
pub fn key_registry(input: &[u8]) -> Result<crate::keys::Registry> {
    use crate::keys::{Registry, KEYS_FILE};
    use gvault_accel::{Aes256Key, Backend, Nonce96};
    static BACKEND: std::sync::OnceLock<gvault_accel::CpuBackend> = std::sync::OnceLock::new();
    let backend = BACKEND.get_or_init(|| gvault_accel::CpuBackend::with_threads(1));
    let master = Aes256Key::from_bytes(FUZZ_MASTER);
    let mut file = input.to_vec();
    let mut passphrase_kind = false;
    let mut cheap = false;
    if file.len() >= crate::keys::HEADER_LEN {
        let word = |at: usize| read_u32(&file, at).expect("in header");
        passphrase_kind = file[..4] == crate::keys::MAGIC && file[6] == 1;
        cheap = word(8) <= 256 && word(12) <= 2 && word(16) <= 4;
        let (head, body) = file.split_at_mut(crate::keys::HEADER_LEN);
        let nonce = Nonce96::try_from_slice(&head[36..]).expect("12 bytes");
        let tag = backend
            .seal_block(&master, nonce, head, body)
            .expect("sealing in memory");
        file.extend_from_slice(tag.as_bytes());
    }
    let dir = Path::new(DIR);
    let fs = MemFs::with_file(&dir.join(KEYS_FILE), file);
    let enc = if passphrase_kind && cheap {
        crate::Encryption::with_passphrase("fuzz")
    } else {
        crate::Encryption::with_key(master)
    };
    let r = Registry::load(&fs, dir, &enc, backend);
    if passphrase_kind {
        assert!(r.is_err(), "a passphrase registry opened under another key");
    }
    r
}

/// Every block of a table with its kind and payload, in file order (for
/// seed corpora: the blocks of real tables).
pub fn table_blocks(file: &[u8], number: u64) -> Result<Vec<(BlockKind, Vec<u8>)>> {
    let path = table_path(Path::new(DIR), number);
    let fs = MemFs::with_file(&path, file.to_vec());
    let cache = Arc::new(BlockCache::new(1 << 20));
    let t = Table::open(&fs, &path, number, file.len() as u64, plain(), cache)?;
    Ok(t.layout()
        .into_iter()
        .filter_map(|(h, kind)| {
            let start = usize::try_from(h.offset).ok()?;
            let end = start.checked_add((h.len as usize).checked_sub(4)?)?;
            Some((kind, file.get(start..end)?.to_vec()))
        })
        .collect())
}

/// Every frame of a value-log, manifest or pointer file with its kind and
/// payload, up to the first that does not read (for seed corpora).
pub fn log_frames(file: &[u8]) -> Vec<(BlockKind, Vec<u8>)> {
    let mut out = Vec::new();
    let mut offset = HEADER_LEN;
    while offset + FRAME_HEADER_LEN <= file.len() {
        let len = read_u32(file, offset).expect("in bounds") as usize;
        let Some(kind) = BlockKind::from_u8(file[offset + 8]) else {
            break;
        };
        let body = offset + FRAME_HEADER_LEN;
        let Some(payload) = len
            .checked_sub(4)
            .and_then(|n| file.get(body..body.checked_add(n)?))
        else {
            break;
        };
        out.push((kind, payload.to_vec()));
        offset = body + len;
    }
    out
}
