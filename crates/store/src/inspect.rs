//! `verify` (read and check every block of every live file, and every live
//! value) and `stats`.

use std::fmt;
use std::sync::Arc;

use crate::db::{DbInner, ReadOptions};
use crate::db_iter::DbIterator;
use crate::error::{Error, IoContext, Result};
use crate::format::{vlog_path, FileKind, LogPosition, HEADER_LEN};
use crate::log_reader::{open_log_file, LogReader};
use crate::version::NUM_LEVELS;

#[derive(Debug, Default)]
pub struct VerifyReport {
    pub tables: u64,
    pub table_blocks: u64,
    pub table_entries: u64,
    pub vlog_files: u64,
    pub vlog_frames: u64,
    pub live_keys: u64,
    /// Every problem found; empty means the store is consistent.
    pub problems: Vec<Error>,
}

impl VerifyReport {
    pub fn is_clean(&self) -> bool {
        self.problems.is_empty()
    }
}

impl fmt::Display for VerifyReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "checked {} tables ({} blocks, {} entries), {} value-log files ({} frames), {} live keys",
            self.tables, self.table_blocks, self.table_entries, self.vlog_files, self.vlog_frames, self.live_keys
        )?;
        if self.problems.is_empty() {
            write!(f, "no problems found")
        } else {
            write!(f, "{} problem(s):", self.problems.len())?;
            for p in &self.problems {
                write!(f, "\n  {p}")?;
            }
            Ok(())
        }
    }
}

/// `progress(bytes, total)` is called after each file: bytes of the live
/// tables and value-log files checked so far, of `total` (a value-log file
/// whose end is not known counts 0).
pub fn verify(inner: &Arc<DbInner>, progress: &mut dyn FnMut(u64, u64)) -> Result<VerifyReport> {
    let mut r = VerifyReport::default();
    let version = inner.current();
    let head = inner.log_end();
    // What the manifest (or the live head) says each file holds.
    let expected = |meta: &crate::version::LogMeta| match (meta.sealed, head) {
        (Some((size, blocks)), _) => Some((size, blocks)),
        (None, Some(h)) if h.file == meta.number => Some((h.offset, h.block)),
        _ => None,
    };
    let total = version.levels.iter().flatten().map(|f| f.size).sum::<u64>()
        + version
            .logs
            .values()
            .filter_map(|m| expected(m).map(|(size, _)| size))
            .sum::<u64>();
    let mut done = 0;
    for f in version.levels.iter().flatten() {
        r.tables += 1;
        match inner.tables.get(f).and_then(|t| t.verify()) {
            Ok((blocks, entries)) => {
                r.table_blocks += blocks;
                r.table_entries += entries;
            }
            Err(e) => note(&mut r.problems, e),
        }
        done += f.size;
        progress(done, total);
    }
    for meta in version.logs.values() {
        r.vlog_files += 1;
        let end = expected(meta);
        match verify_log(inner, meta.number, end) {
            Ok(frames) => r.vlog_frames += frames,
            // Dropped meanwhile (a flushed file without values goes as
            // soon as the replay pointer passes it, and GC drops others).
            Err(_) if !inner.has_log(meta.number) => {}
            Err(e) => note(&mut r.problems, e),
        }
        done += end.map_or(0, |(size, _)| size);
        progress(done, total);
    }
    let mut it = match DbIterator::new(inner, &ReadOptions::default()) {
        Ok(it) => it,
        Err(e) => {
            note(&mut r.problems, e);
            return Ok(r);
        }
    };
    it.seek_to_first();
    while it.valid() {
        r.live_keys += 1;
        if let Err(e) = it.value() {
            note(&mut r.problems, e);
        }
        it.next();
    }
    if let Err(e) = it.status() {
        note(&mut r.problems, e);
    }
    Ok(r)
}

/// Adds a problem unless the same one is already listed: a damaged table
/// block is found by the table pass and again by the walk over live keys.
fn note(problems: &mut Vec<Error>, e: Error) {
    let text = e.to_string();
    if !problems.iter().any(|p| p.to_string() == text) {
        problems.push(e);
    }
}

/// Reads every frame of value-log file `n` up to `expected` (size and
/// block count the manifest recorded, or the live head's position; None:
/// the whole file) and checks the file holds exactly that.
fn verify_log(inner: &DbInner, n: u64, expected: Option<(u64, u32)>) -> Result<u64> {
    let path = vlog_path(&inner.dir, n);
    let file = open_log_file(&*inner.fs, &path, FileKind::ValueLog, n, &*inner.vlog_codec)?;
    let len = file
        .len()
        .ctx(|| format!("reading size of {}", path.display()))?;
    if let Some(expected) = expected {
        crate::recovery::check_log_len(&path, len, expected)?;
    }
    let end = expected.map_or(len, |(size, _)| size);
    let start = LogPosition {
        file: n,
        offset: HEADER_LEN as u64,
        block: 0,
    };
    let mut reader = LogReader::new(file, &path, start, end, inner.vlog_codec.clone());
    let mut frames = 0;
    loop {
        match reader.next()? {
            Ok(None) => {
                let found = reader.position().block;
                return match expected {
                    Some((_, blocks)) if found != blocks => Err(Error::corruption(
                        &path,
                        format!("offset {end}"),
                        format!("holds {found} blocks; the manifest records {blocks}"),
                    )),
                    _ => Ok(frames),
                };
            }
            Ok(Some(_)) => frames += 1,
            Err(bad) => {
                return Err(Error::corruption(
                    &path,
                    format!("block {} at offset {}", bad.block, bad.offset),
                    bad.reason,
                ))
            }
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct Stats {
    /// (tables, bytes) per level.
    pub levels: Vec<(usize, u64)>,
    pub vlog_files: usize,
    pub vlog_bytes: u64,
    pub memtable_bytes: usize,
    pub immutable_memtables: usize,
    pub last_sequence: u64,
    pub block_cache_bytes: usize,
    pub live_snapshots: usize,
}

pub fn stats(inner: &DbInner) -> Stats {
    let head = inner.log_end();
    let st = inner.lock_state();
    let v = &st.current;
    let vlog_bytes = v
        .logs
        .values()
        .map(|l| match (l.sealed, head) {
            (Some((s, _)), _) => s,
            (None, Some(h)) if h.file == l.number => h.offset,
            _ => 0,
        })
        .sum();
    Stats {
        levels: (0..NUM_LEVELS)
            .map(|l| (v.levels[l].len(), v.level_bytes(l)))
            .collect(),
        vlog_files: v.logs.len(),
        vlog_bytes,
        memtable_bytes: st.mem.approximate_bytes(),
        immutable_memtables: st.imm.len(),
        last_sequence: inner.visible_seq(),
        block_cache_bytes: inner.block_cache.used_bytes(),
        live_snapshots: st.snapshots.values().sum(),
    }
}

impl fmt::Display for Stats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "last sequence:      {}", self.last_sequence)?;
        writeln!(
            f,
            "memtable:           {} bytes (+{} immutable)",
            self.memtable_bytes, self.immutable_memtables
        )?;
        writeln!(
            f,
            "value log:          {} files, {} bytes",
            self.vlog_files, self.vlog_bytes
        )?;
        writeln!(f, "block cache:        {} bytes", self.block_cache_bytes)?;
        for (l, (files, bytes)) in self.levels.iter().enumerate() {
            if *files > 0 {
                writeln!(f, "level {l}:            {files} tables, {bytes} bytes")?;
            }
        }
        Ok(())
    }
}

/// Byte ranges `(offset, len)` of every block of a store file, its header
/// first, as the file's own framing describes them (seals are not checked).
/// For tools and tests that inspect or deliberately damage files.
pub fn block_extents(path: &std::path::Path) -> Result<Vec<(u64, u64)>> {
    block_extents_with(path, None)
}

/// [`block_extents`] for a file of an encrypted store: a table's footer and
/// index are sealed, so reading its layout needs the master key (the key
/// registry is read from the file's directory).
pub fn block_extents_with(
    path: &std::path::Path,
    encryption: Option<&crate::keys::Encryption>,
) -> Result<Vec<(u64, u64)>> {
    use crate::block::Block;
    use crate::codec::{BlockCodec, BlockContext, BlockKind, Crc32cCodec};
    use crate::coding::Decoder;
    use crate::format::{FileHeader, FileKind};
    use crate::log_writer::FRAME_HEADER_LEN;
    use crate::table_builder::{FOOTER_BLOCK, FOOTER_PAYLOAD_LEN};

    let bytes = std::fs::read(path).ctx(|| format!("reading {}", path.display()))?;
    let header = FileHeader::decode(&bytes)
        .map_err(|e| Error::corruption(path, "file header at offset 0", e.to_string()))?;
    let bad = |what: &str| Error::corruption(path, "block layout", what.to_string());
    let codec: Box<dyn BlockCodec> = match encryption {
        Some(enc) if header.key_id != 0 => {
            let dir = path.parent().unwrap_or(std::path::Path::new("."));
            let backend: std::sync::Arc<dyn gvault_accel::Backend> =
                gvault_accel::CpuBackend::shared();
            let r = crate::keys::Registry::load(&crate::env::OsFs, dir, enc, &*backend)?;
            Box::new(r.codec(backend, None))
        }
        _ => Box::new(Crc32cCodec),
    };
    let overhead = codec.overhead();
    let open = |kind, block, off: u64, len: u64| -> Result<Vec<u8>> {
        let sealed = bytes
            .get(off as usize..(off + len) as usize)
            .ok_or_else(|| bad("block outside the file"))?;
        let ctx = BlockContext {
            key_id: header.key_id,
            file_number: header.file_number,
            block_number: block,
            offset: off,
            kind,
        };
        codec
            .open(&ctx, sealed.to_vec())
            .map_err(|e| Error::corruption(path, "block layout", e.0))
    };
    let mut out = vec![(0u64, HEADER_LEN as u64)];
    if header.kind != FileKind::Table {
        let mut p = HEADER_LEN;
        while p + FRAME_HEADER_LEN <= bytes.len() {
            let len = u32::from_le_bytes(bytes[p..p + 4].try_into().expect("4 bytes")) as usize;
            let total = (FRAME_HEADER_LEN + len).min(bytes.len() - p);
            out.push((p as u64, total as u64));
            p += total;
        }
        return Ok(out);
    }
    let footer_len = FOOTER_PAYLOAD_LEN + overhead;
    let footer_at = bytes
        .len()
        .checked_sub(footer_len)
        .ok_or_else(|| bad("no footer"))?;
    let footer = open(
        BlockKind::Footer,
        FOOTER_BLOCK,
        footer_at as u64,
        footer_len as u64,
    )?;
    let mut d = Decoder::new(&footer);
    let mut handle = || -> Option<(u64, u64, u32)> {
        let off = d.u64()?;
        let len = d.u32()?;
        let block = d.u32()?;
        Some((off, u64::from(len), block))
    };
    let index = handle().ok_or_else(|| bad("bad footer"))?;
    let filter = handle().ok_or_else(|| bad("bad footer"))?;
    let index_bytes = open(BlockKind::Index, index.2, index.0, index.1)?;
    let block = Block::decode(index_bytes).map_err(|r| bad(&r))?;
    for i in 0..block.len() {
        let h = crate::format::BlockHandle::decode_from(&mut Decoder::new(block.value(i)))
            .ok_or_else(|| bad("bad index entry"))?;
        out.push((h.offset, u64::from(h.len)));
    }
    out.push((filter.0, filter.1));
    out.push((index.0, index.1));
    out.push((footer_at as u64, footer_len as u64));
    Ok(out)
}
