//! Byte layouts shared by every file: the file header, internal keys, block
//! handles, value pointers and file names. docs/format.md describes each.

use std::cmp::Ordering;
use std::path::{Path, PathBuf};

use crate::coding::{put_u32, put_u64, put_varint, Decoder};

/// Version of every on-disk layout in this crate; bound into each block's
/// checksum (later: its associated data) so that a block cannot be replayed
/// into a file of another version.
pub const FORMAT_VERSION: u16 = 1;
pub const MAGIC: [u8; 4] = *b"GVLT";
pub const HEADER_LEN: usize = 24;
/// The block number of the pointer file's one record. The pointer file
/// carries its manifest's file number; a manifest is rewritten long before
/// its frames count this high, so the two never seal under one nonce.
pub const POINTER_BLOCK: u32 = u32::MAX - 1;

/// Sequence numbers are 56 bits: the low byte of a key trailer is the type.
pub const MAX_SEQUENCE: u64 = (1 << 56) - 1;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum FileKind {
    ValueLog = 1,
    Table = 2,
    Manifest = 3,
    Pointer = 4,
}

impl FileKind {
    pub fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            1 => FileKind::ValueLog,
            2 => FileKind::Table,
            3 => FileKind::Manifest,
            4 => FileKind::Pointer,
            _ => return None,
        })
    }
}

/// The first 24 bytes of every file. The data-key id names the key that
/// seals the file's blocks (0: none, blocks carry CRC32C).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileHeader {
    pub kind: FileKind,
    pub key_id: u32,
    pub file_number: u64,
}

/// Why a header was rejected; callers decide whether that means "not a
/// store" (pointer file) or "corruption" (a file the manifest names).
#[derive(Debug, PartialEq, Eq)]
pub enum HeaderError {
    TooShort,
    BadMagic,
    BadChecksum,
    UnknownVersion(u16),
    UnknownKind(u8),
}

impl std::fmt::Display for HeaderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HeaderError::TooShort => write!(f, "file is shorter than its {HEADER_LEN}-byte header"),
            HeaderError::BadMagic => {
                write!(f, "file does not start with the gvault magic \"GVLT\"")
            }
            HeaderError::BadChecksum => write!(f, "file header checksum mismatch"),
            HeaderError::UnknownVersion(v) => {
                write!(f, "format version {v} (this build reads {FORMAT_VERSION})")
            }
            HeaderError::UnknownKind(k) => write!(f, "unknown file kind {k}"),
        }
    }
}

impl FileHeader {
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(HEADER_LEN);
        b.extend_from_slice(&MAGIC);
        b.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        b.push(self.kind as u8);
        b.push(0); // reserved flags
        put_u32(&mut b, self.key_id);
        put_u64(&mut b, self.file_number);
        let crc = crc32c::crc32c(&b);
        put_u32(&mut b, crc);
        b
    }

    pub fn decode(buf: &[u8]) -> Result<FileHeader, HeaderError> {
        if buf.len().min(4) > 0 && buf[..buf.len().min(4)] != MAGIC[..buf.len().min(4)] {
            return Err(HeaderError::BadMagic);
        }
        if buf.len() < HEADER_LEN {
            return Err(HeaderError::TooShort);
        }
        let buf = &buf[..HEADER_LEN];
        let mut d = Decoder::new(&buf[4..]);
        let version = d.u16().ok_or(HeaderError::TooShort)?;
        let kind = d.u8().ok_or(HeaderError::TooShort)?;
        let _flags = d.u8();
        let key_id = d.u32().ok_or(HeaderError::TooShort)?;
        let file_number = d.u64().ok_or(HeaderError::TooShort)?;
        let crc = d.u32().ok_or(HeaderError::TooShort)?;
        if crc != crc32c::crc32c(&buf[..20]) {
            return Err(HeaderError::BadChecksum);
        }
        if version != FORMAT_VERSION {
            return Err(HeaderError::UnknownVersion(version));
        }
        let kind = FileKind::from_u8(kind).ok_or(HeaderError::UnknownKind(kind))?;
        Ok(FileHeader {
            kind,
            key_id,
            file_number,
        })
    }
}

/// What an internal-key entry holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum ValueType {
    Deletion = 0,
    /// The value itself follows.
    Inline = 1,
    /// A [`ValuePointer`] into the value log follows.
    Pointer = 2,
}

/// Seeks use the largest type so that they land before every entry of the
/// same sequence number.
pub const TYPE_FOR_SEEK: u8 = 0xff;

impl ValueType {
    pub fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            0 => ValueType::Deletion,
            1 => ValueType::Inline,
            2 => ValueType::Pointer,
            _ => return None,
        })
    }
}

/// An internal key: user key ‖ little-endian u64 of (sequence << 8 | type).
pub fn internal_key(user_key: &[u8], seq: u64, t: u8) -> Vec<u8> {
    let mut k = Vec::with_capacity(user_key.len() + 8);
    k.extend_from_slice(user_key);
    put_u64(&mut k, (seq << 8) | u64::from(t));
    k
}

/// [`internal_key`] written into `dst` (cleared first), for lookups that
/// reuse one buffer.
pub fn internal_key_into(dst: &mut Vec<u8>, user_key: &[u8], seq: u64, t: u8) {
    dst.clear();
    dst.extend_from_slice(user_key);
    put_u64(dst, (seq << 8) | u64::from(t));
}

pub struct ParsedKey<'a> {
    pub user_key: &'a [u8],
    pub seq: u64,
    pub value_type: ValueType,
}

pub fn parse_internal_key(ikey: &[u8]) -> Option<ParsedKey<'_>> {
    let n = ikey.len().checked_sub(8)?;
    let trailer = u64::from_le_bytes(ikey[n..].try_into().ok()?);
    Some(ParsedKey {
        user_key: &ikey[..n],
        seq: trailer >> 8,
        value_type: ValueType::from_u8(trailer as u8)?,
    })
}

pub fn user_key(ikey: &[u8]) -> &[u8] {
    &ikey[..ikey.len().saturating_sub(8)]
}

fn trailer(ikey: &[u8]) -> u64 {
    let n = ikey.len().saturating_sub(8);
    let mut t = [0u8; 8];
    t[..ikey.len() - n].copy_from_slice(&ikey[n..]);
    u64::from_le_bytes(t)
}

/// Internal keys order by user key ascending, then by trailer descending,
/// so that the newest version of a key comes first.
pub fn compare_internal(a: &[u8], b: &[u8]) -> Ordering {
    user_key(a)
        .cmp(user_key(b))
        .then_with(|| trailer(b).cmp(&trailer(a)))
}

/// Where a block lies in a table: offset of its sealed bytes, their length,
/// and its block number (part of the sealing context).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockHandle {
    pub offset: u64,
    pub len: u32,
    pub block: u32,
}

impl BlockHandle {
    pub fn encode_to(&self, dst: &mut Vec<u8>) {
        put_varint(dst, self.offset);
        put_varint(dst, u64::from(self.len));
        put_varint(dst, u64::from(self.block));
    }

    pub fn decode_from(d: &mut Decoder<'_>) -> Option<BlockHandle> {
        Some(BlockHandle {
            offset: d.varint()?,
            len: d.varint_u32()?,
            block: d.varint_u32()?,
        })
    }
}

/// Where a large value lives: one value frame of a value-log file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ValuePointer {
    pub file: u64,
    pub frame: BlockHandle,
}

impl ValuePointer {
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(20);
        put_varint(&mut b, self.file);
        self.frame.encode_to(&mut b);
        b
    }

    pub fn decode(buf: &[u8]) -> Option<ValuePointer> {
        let mut d = Decoder::new(buf);
        let p = ValuePointer {
            file: d.varint()?,
            frame: BlockHandle::decode_from(&mut d)?,
        };
        d.is_empty().then_some(p)
    }
}

/// A place in the value log: the replay pointer and memtable boundaries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct LogPosition {
    pub file: u64,
    pub offset: u64,
    pub block: u32,
}

impl LogPosition {
    pub fn encode_to(&self, dst: &mut Vec<u8>) {
        put_varint(dst, self.file);
        put_varint(dst, self.offset);
        put_varint(dst, u64::from(self.block));
    }

    pub fn decode_from(d: &mut Decoder<'_>) -> Option<LogPosition> {
        Some(LogPosition {
            file: d.varint()?,
            offset: d.varint()?,
            block: d.varint_u32()?,
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileType {
    Table,
    ValueLog,
    Manifest,
    Pointer,
    PointerTemp,
    Lock,
    KeyRegistry,
    KeyRegistryTemp,
    /// A file being re-sealed under a new data key; renamed over the file
    /// of the same number when complete, removed at open if left behind.
    ResealTemp,
}

pub const POINTER_FILE: &str = "CURRENT";
pub const POINTER_TEMP: &str = "CURRENT.tmp";
pub const LOCK_FILE: &str = "LOCK";

pub fn table_path(dir: &Path, n: u64) -> PathBuf {
    dir.join(format!("{n:06}.sst"))
}

pub fn vlog_path(dir: &Path, n: u64) -> PathBuf {
    dir.join(format!("{n:06}.vlog"))
}

pub fn reseal_temp_path(dir: &Path, n: u64) -> PathBuf {
    dir.join(format!("{n:06}.reseal"))
}

pub fn manifest_path(dir: &Path, n: u64) -> PathBuf {
    dir.join(format!("MANIFEST-{n:06}"))
}

/// Recognises the store's own file names; anything else in the directory is
/// left alone (and makes an empty-looking directory "not a store").
pub fn parse_file_name(name: &str) -> Option<(FileType, u64)> {
    match name {
        POINTER_FILE => return Some((FileType::Pointer, 0)),
        POINTER_TEMP => return Some((FileType::PointerTemp, 0)),
        LOCK_FILE => return Some((FileType::Lock, 0)),
        crate::keys::KEYS_FILE => return Some((FileType::KeyRegistry, 0)),
        crate::keys::KEYS_TEMP => return Some((FileType::KeyRegistryTemp, 0)),
        _ => {}
    }
    let number = |s: &str| -> Option<u64> {
        (!s.is_empty() && s.bytes().all(|c| c.is_ascii_digit()))
            .then(|| s.parse().ok())
            .flatten()
    };
    if let Some(n) = name.strip_prefix("MANIFEST-") {
        return Some((FileType::Manifest, number(n)?));
    }
    if let Some(n) = name.strip_suffix(".sst") {
        return Some((FileType::Table, number(n)?));
    }
    if let Some(n) = name.strip_suffix(".vlog") {
        return Some((FileType::ValueLog, number(n)?));
    }
    if let Some(n) = name.strip_suffix(".reseal") {
        return Some((FileType::ResealTemp, number(n)?));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip_and_rejects_damage() {
        let h = FileHeader {
            kind: FileKind::Table,
            key_id: 0,
            file_number: 42,
        };
        let mut b = h.encode();
        assert_eq!(b.len(), HEADER_LEN);
        assert_eq!(FileHeader::decode(&b), Ok(h));
        b[10] ^= 1;
        assert_eq!(FileHeader::decode(&b), Err(HeaderError::BadChecksum));
        assert_eq!(FileHeader::decode(b"nope"), Err(HeaderError::BadMagic));
        assert_eq!(FileHeader::decode(b"GVLT"), Err(HeaderError::TooShort));
    }

    #[test]
    fn internal_order_is_user_key_then_newest_first() {
        let a1 = internal_key(b"a", 1, 1);
        let a2 = internal_key(b"a", 2, 1);
        let ab = internal_key(b"ab", 9, 1);
        assert_eq!(compare_internal(&a2, &a1), Ordering::Less);
        assert_eq!(compare_internal(&a1, &ab), Ordering::Less);
        let seek = internal_key(b"a", 2, TYPE_FOR_SEEK);
        assert_eq!(compare_internal(&seek, &a2), Ordering::Less);
    }

    #[test]
    fn file_names() {
        assert_eq!(parse_file_name("000012.sst"), Some((FileType::Table, 12)));
        assert_eq!(
            parse_file_name("MANIFEST-000003"),
            Some((FileType::Manifest, 3))
        );
        assert_eq!(parse_file_name("x.sst"), None);
        assert_eq!(parse_file_name("notes.txt"), None);
    }
}
