//! Re-sealing a whole file under the current data key, in place: same file
//! number, same layout, each block opened under its old key and sealed under
//! the new one. Nonces are unique per key and no block of this file number
//! was sealed under the new key before (docs/format.md §3.2), so the nonces
//! may stay. The new bytes go to a temporary file, synced, then renamed over
//! the old one: a crash leaves one or the other, each whole and readable.
//!
//! Value logs stream through three threads (read, crypto, write) in batches
//! of whole frames, one open job and one seal job per batch, in place in the
//! read buffer; tables (a few MiB) go in one batch.

use std::path::Path;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};

use crate::codec::{BlockContext, BlockKind, Reseal, ResealError};
use crate::db::DbInner;
use crate::env::WritableFile;
use crate::error::{Error, IoContext, Result};
use crate::format::{reseal_temp_path, table_path, vlog_path, FileHeader, FileKind, HEADER_LEN};
use crate::log_reader::open_log_file;
use crate::log_writer::FRAME_HEADER_LEN;
use crate::rotation::Throttle;
use crate::table_reader::location;
use crate::version::FileMeta;

/// Bytes of whole frames per batch: large enough that each job is big (and
/// splits across the accelerator's threads), small enough to pipeline.
const BATCH_BYTES: usize = 8 << 20;
/// Batch buffers in flight: one per stage.
const BUFFERS: usize = 3;

/// A sealed block inside a batch buffer.
struct Span {
    /// Where its sealed bytes start in the buffer.
    start: usize,
    len: usize,
    ctx: BlockContext,
}

struct Batch {
    buf: Vec<u8>,
    /// Bytes of `buf` that hold frames.
    used: usize,
    spans: Vec<Span>,
}

/// Re-seals the blocks of `batch` (spans in increasing order, disjoint).
fn reseal_spans(inner: &DbInner, path: &Path, batch: &mut Batch, to_key: u32) -> Result<()> {
    let mut rest: &mut [u8] = &mut batch.buf[..batch.used];
    let mut at = 0;
    let mut blocks = Vec::with_capacity(batch.spans.len());
    for s in &batch.spans {
        let tail = std::mem::take(&mut rest).split_at_mut(s.start - at).1;
        let (sealed, tail) = tail.split_at_mut(s.len);
        rest = tail;
        at = s.start + s.len;
        blocks.push(Reseal {
            from: s.ctx,
            to: BlockContext {
                key_id: to_key,
                ..s.ctx
            },
            sealed,
        });
    }
    inner.codec.reseal_batch(&mut blocks).map_err(|e| match e {
        ResealError::Open { block, reason } => {
            let c = batch.spans[block].ctx;
            Error::corruption(
                path,
                format!("block {} at offset {}", c.block_number, c.offset),
                reason.0,
            )
        }
        ResealError::Seal(e) => Error::Seal(format!("{}: {e}", path.display())),
    })
}

fn create_temp(
    inner: &DbInner,
    n: u64,
    kind: FileKind,
    key_id: u32,
) -> Result<Box<dyn WritableFile>> {
    let tmp = reseal_temp_path(&inner.dir, n);
    let mut out = inner
        .fs
        .create(&tmp)
        .ctx(|| format!("creating {}", tmp.display()))?;
    let header = FileHeader {
        kind,
        key_id,
        file_number: n,
    };
    out.append(&header.encode())
        .ctx(|| format!("writing header of {}", tmp.display()))?;
    Ok(out)
}

/// Renames the finished temporary file over `path` if `still_live` (checked
/// under whatever lock keeps the file from being dropped meanwhile). The
/// caller syncs the directory before any key is retired.
fn install(inner: &DbInner, n: u64, path: &Path, still_live: bool) -> Result<bool> {
    let tmp = reseal_temp_path(&inner.dir, n);
    if !still_live {
        let _ = inner.fs.remove(&tmp);
        return Ok(false);
    }
    inner
        .fs
        .rename(&tmp, path)
        .ctx(|| format!("renaming {} over {}", tmp.display(), path.display()))?;
    Ok(true)
}

/// A re-sealed value-log file written to its temporary name, not yet
/// synced nor installed: [`finish_log`] does both, on another thread, while
/// the next file is read and sealed.
pub(crate) struct WrittenLog {
    n: u64,
    out: Box<dyn WritableFile>,
}

/// Syncs a re-sealed value-log file and renames it over the old one.
/// False when GC dropped the file meanwhile.
pub(crate) fn finish_log(inner: &DbInner, w: WrittenLog) -> Result<bool> {
    let WrittenLog { n, mut out } = w;
    let tmp = reseal_temp_path(&inner.dir, n);
    let synced = out.sync().ctx(|| format!("syncing {}", tmp.display()));
    drop(out);
    if let Err(e) = synced {
        let _ = inner.fs.remove(&tmp);
        return Err(e);
    }
    // GC drops value-log files under the log lock: holding it, the file
    // cannot be dropped between this check and the rename.
    let installed = {
        let _log = inner.lock_log();
        let live = inner.has_log(n);
        install(inner, n, &vlog_path(&inner.dir, n), live)
    };
    inner.vlog.forget(n);
    installed
}

/// Re-seals sealed value-log file `n` (`end` bytes and `blocks` frames, as
/// the manifest records) under `to_key` into its temporary file. None when
/// it already uses `to_key`.
pub(crate) fn reseal_log(
    inner: &DbInner,
    n: u64,
    (end, blocks): (u64, u32),
    to_key: u32,
    throttle: &mut Throttle,
) -> Result<Option<WrittenLog>> {
    let path = vlog_path(&inner.dir, n);
    let file = open_log_file(&*inner.fs, &path, FileKind::ValueLog, n, &*inner.codec)?;
    if file.key_id == to_key {
        return Ok(None);
    }
    let out = create_temp(inner, n, FileKind::ValueLog, to_key)?;
    let result = std::thread::scope(|scope| {
        let (free_tx, free_rx) = sync_channel::<Vec<u8>>(BUFFERS);
        let (read_tx, read_rx) = sync_channel::<Batch>(1);
        let (sealed_tx, sealed_rx) = sync_channel::<Batch>(1);
        for _ in 0..BUFFERS {
            free_tx.send(Vec::new()).expect("channel has room");
        }
        let path = &path;
        let reader = scope
            .spawn(move || read_frames(&file, path, n, (end, blocks), throttle, free_rx, read_tx));
        let writer = scope.spawn(move || write_batches(out, sealed_rx, free_tx));
        let mut crypto = Ok(());
        for mut batch in read_rx {
            crypto = reseal_spans(inner, path, &mut batch, to_key);
            if crypto.is_err() || sealed_tx.send(batch).is_err() {
                break;
            }
        }
        drop(sealed_tx);
        let read = reader.join().expect("reader thread panicked");
        let written = writer.join().expect("writer thread panicked");
        read.and(crypto).and(written)
    });
    match result {
        Ok(out) => Ok(Some(WrittenLog { n, out })),
        Err(e) => {
            let _ = inner.fs.remove(&reseal_temp_path(&inner.dir, n));
            Err(e)
        }
    }
}

/// Reader stage: batches of whole frames, checked for sequence and bounds
/// (the seals are checked by the crypto stage).
fn read_frames(
    file: &crate::log_reader::LogFile,
    path: &Path,
    n: u64,
    (end, blocks): (u64, u32),
    throttle: &mut Throttle,
    free: Receiver<Vec<u8>>,
    next: SyncSender<Batch>,
) -> Result<()> {
    let mut offset = HEADER_LEN as u64;
    let mut block = 0u32;
    let corrupt = |off: u64, b: u32, why: String| {
        Error::corruption(path, format!("block {b} at offset {off}"), why)
    };
    while offset < end {
        let Ok(mut buf) = free.recv() else {
            return Ok(()); // a later stage stopped; it reports why
        };
        let want = (end - offset).min(BATCH_BYTES as u64) as usize;
        if buf.len() < want {
            buf.resize(want, 0);
        }
        read_at(file, path, &mut buf[..want], offset)?;
        let mut filled = want;
        let mut spans = Vec::new();
        let mut pos = 0usize;
        while filled - pos >= FRAME_HEADER_LEN {
            let head = &buf[pos..pos + FRAME_HEADER_LEN];
            let len = u32::from_le_bytes(head[0..4].try_into().expect("4 bytes")) as usize;
            let number = u32::from_le_bytes(head[4..8].try_into().expect("4 bytes"));
            let at = offset + pos as u64;
            let Some(kind) = BlockKind::from_u8(head[8]) else {
                return Err(corrupt(
                    at,
                    block,
                    format!("unknown block kind {}", head[8]),
                ));
            };
            if number != block {
                return Err(corrupt(at, block, format!("frame says block {number}")));
            }
            let body = at + FRAME_HEADER_LEN as u64;
            if len as u64 > end - body {
                return Err(corrupt(at, block, "frame runs past the sealed end".into()));
            }
            if pos + FRAME_HEADER_LEN + len > filled {
                if pos > 0 {
                    break; // the next batch starts with this frame
                }
                // One frame larger than a batch: read it whole.
                filled = FRAME_HEADER_LEN + len;
                buf.resize(filled, 0);
                read_at(file, path, &mut buf[FRAME_HEADER_LEN..filled], body)?;
            }
            spans.push(Span {
                start: pos + FRAME_HEADER_LEN,
                len,
                ctx: BlockContext {
                    key_id: file.key_id,
                    file_number: n,
                    block_number: block,
                    offset: at,
                    kind,
                },
            });
            pos += FRAME_HEADER_LEN + len;
            block += 1;
        }
        if pos == 0 {
            return Err(corrupt(offset, block, "frame header cut short".into()));
        }
        throttle.charge(pos as u64);
        offset += pos as u64;
        let batch = Batch {
            buf,
            used: pos,
            spans,
        };
        if next.send(batch).is_err() {
            return Ok(());
        }
    }
    if block != blocks {
        return Err(corrupt(
            offset,
            block,
            format!("file holds {block} frames, the manifest says {blocks}"),
        ));
    }
    Ok(())
}

fn read_at(
    file: &crate::log_reader::LogFile,
    path: &Path,
    buf: &mut [u8],
    offset: u64,
) -> Result<()> {
    file.file.read_exact_at(buf, offset).map_err(|e| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            Error::corruption(
                path,
                format!("offset {offset}"),
                "file is shorter than sealed",
            )
        } else {
            Error::io(format!("reading {} at offset {offset}", path.display()), e)
        }
    })
}

/// Writer stage: appends batches and hands buffers back to the reader.
fn write_batches(
    mut out: Box<dyn WritableFile>,
    batches: Receiver<Batch>,
    free: SyncSender<Vec<u8>>,
) -> Result<Box<dyn WritableFile>> {
    for b in batches {
        out.append(&b.buf[..b.used])
            .ctx(|| "writing a re-sealed file".to_string())?;
        let _ = free.send(b.buf); // the reader may be done
    }
    Ok(out)
}

/// Re-seals table `f` under `to_key` in one batch. The caller holds the
/// compaction lock and has checked that `f` is live, so it stays live.
/// False when it already uses `to_key`: then only its header was read, and
/// `throttle` is not charged (a pass with nothing to do must not sleep).
pub(crate) fn reseal_table(
    inner: &DbInner,
    f: &FileMeta,
    to_key: u32,
    throttle: &mut Throttle,
) -> Result<bool> {
    let path = table_path(&inner.dir, f.number);
    let src = inner
        .fs
        .open_read(&path)
        .ctx(|| format!("opening {}", path.display()))?;
    // The key comes from the file read here, not from the open table: a
    // table opened before an earlier pass re-sealed this file still reads
    // the old file under the old key, while the path holds the new one.
    let from_key = {
        let mut head = [0u8; HEADER_LEN];
        src.read_exact_at(&mut head, 0)
            .ctx(|| format!("reading header of {}", path.display()))?;
        FileHeader::decode(&head)
            .map_err(|e| Error::corruption(&path, "file header at offset 0", e.to_string()))?
            .key_id
    };
    if from_key == to_key {
        return Ok(false);
    }
    throttle.charge(f.size);
    let table = inner.tables.get(f)?;
    let mut layout = table.layout();
    layout.sort_by_key(|(h, _)| h.offset);
    let mut cursor = HEADER_LEN as u64;
    for (h, _) in &layout {
        if h.offset != cursor {
            return Err(Error::corruption(
                &path,
                location(h),
                format!("table blocks do not tile the file (expected a block at offset {cursor})"),
            ));
        }
        cursor += u64::from(h.len);
    }
    if cursor != f.size {
        return Err(Error::corruption(
            &path,
            "footer",
            format!("blocks end at {cursor}, the table is {} bytes", f.size),
        ));
    }
    let mut buf = vec![0u8; f.size as usize];
    src.read_exact_at(&mut buf, 0)
        .ctx(|| format!("reading {}", path.display()))?;
    let mut batch = Batch {
        used: buf.len(),
        buf,
        spans: layout
            .iter()
            .map(|(h, kind)| Span {
                start: h.offset as usize,
                len: h.len as usize,
                ctx: BlockContext {
                    key_id: from_key,
                    file_number: f.number,
                    block_number: h.block,
                    offset: h.offset,
                    kind: *kind,
                },
            })
            .collect(),
    };
    let written = reseal_spans(inner, &path, &mut batch, to_key).and_then(|()| {
        let mut out = create_temp(inner, f.number, FileKind::Table, to_key)?;
        out.append(&batch.buf[HEADER_LEN..])
            .and_then(|()| out.sync())
            .ctx(|| {
                format!(
                    "writing {}",
                    reseal_temp_path(&inner.dir, f.number).display()
                )
            })
    });
    if let Err(e) = written {
        let _ = inner.fs.remove(&reseal_temp_path(&inner.dir, f.number));
        return Err(e);
    }
    let installed = install(inner, f.number, &path, true)?;
    inner.tables.evict(f.number);
    Ok(installed)
}
