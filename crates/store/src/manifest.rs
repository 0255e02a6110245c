//! The manifest (a log of version edits) and the pointer file `CURRENT`
//! that names it: the seed's superblock. The pointer file is replaced
//! atomically (write a temporary, fsync, rename, fsync the directory), so a
//! crash leaves either the old or the new manifest in force.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::codec::{BlockCodec, BlockKind};
use crate::coding::{put_u64, Decoder};
use crate::env::FileSystem;
use crate::error::{Error, IoContext, Result};
use crate::format::{
    manifest_path, FileHeader, FileKind, LogPosition, HEADER_LEN, POINTER_BLOCK, POINTER_FILE,
    POINTER_TEMP,
};
use crate::log_reader::{open_log_file, LogFile, LogReader};
use crate::log_writer::LogWriter;
use crate::options::Options;
use crate::version::{Version, VersionEdit};

/// The manifest in force. Opened for appending, except on a read-only
/// store, where only its number is known.
pub struct Manifest {
    log: Option<LogWriter>,
    number: u64,
}

impl Manifest {
    /// Writes a new manifest holding `version` as one snapshot edit.
    pub fn create(
        fs: &dyn FileSystem,
        dir: &Path,
        number: u64,
        version: &Version,
        codec: Arc<dyn BlockCodec>,
    ) -> Result<Manifest> {
        let path = manifest_path(dir, number);
        let log = LogWriter::create(fs, &path, FileKind::Manifest, number, codec)?;
        let mut m = Manifest {
            log: Some(log),
            number,
        };
        m.append(&version.snapshot_edit())?;
        Ok(m)
    }

    /// Manifest `number` of a store opened read-only: never appended to.
    pub fn read_only(number: u64) -> Manifest {
        Manifest { log: None, number }
    }

    pub fn number(&self) -> u64 {
        self.number
    }

    pub fn size(&self) -> u64 {
        self.log.as_ref().map_or(0, |l| l.position().offset)
    }

    /// Appends one edit and makes it durable.
    pub fn append(&mut self, edit: &VersionEdit) -> Result<()> {
        let Some(log) = self.log.as_mut() else {
            return Err(Error::InvalidArgument(format!(
                "manifest {} belongs to a store opened read-only",
                self.number
            )));
        };
        log.append_group(vec![(BlockKind::ManifestEdit, edit.encode())])?;
        log.sync()
    }
}

/// A manifest replayed into a version.
pub struct Recovered {
    pub version: Version,
    /// Where a torn last record was dropped, if one was: a file the version
    /// names but which is missing then points at the manifest, not the file.
    pub dropped_tail: Option<(PathBuf, String)>,
}

/// Replays manifest `number` into a version. A last record cut short is a
/// torn append (its operation never completed) and is dropped with a
/// warning; any other damage is corruption.
pub fn recover(
    fs: &dyn FileSystem,
    dir: &Path,
    number: u64,
    codec: Arc<dyn BlockCodec>,
    opts: &Options,
) -> Result<Recovered> {
    let path = manifest_path(dir, number);
    let file =
        open_log_file(fs, &path, FileKind::Manifest, number, &*codec).map_err(|e| match e {
            Error::Io { ref source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
                Error::corruption(&path, "whole file", "manifest named by CURRENT is missing")
            }
            e => e,
        })?;
    let end = file
        .len()
        .ctx(|| format!("reading size of {}", path.display()))?;
    let start = LogPosition {
        file: number,
        offset: HEADER_LEN as u64,
        block: 0,
    };
    let mut reader = LogReader::new(file, &path, start, end, codec);
    let mut version = Version::default();
    let mut edits = 0;
    let mut dropped_tail = None;
    loop {
        match reader.next()? {
            Ok(None) => break,
            Ok(Some(frame)) => {
                let loc = format!(
                    "block {} at offset {}",
                    frame.handle.block, frame.handle.offset
                );
                if frame.kind != BlockKind::ManifestEdit {
                    return Err(Error::corruption(&path, loc, "not a manifest record"));
                }
                let edit = VersionEdit::decode(&frame.payload)
                    .ok_or_else(|| Error::corruption(&path, &loc, "malformed version edit"))?;
                version = version
                    .apply(&edit)
                    .map_err(|r| Error::corruption(&path, &loc, r))?;
                edits += 1;
            }
            Err(bad) => {
                let loc = format!("block {} at offset {}", bad.block, bad.offset);
                // Edits are small and synced one at a time, so a crash can
                // only leave the last one short; anything else is damage.
                if edits == 0 || !bad.truncated || reader.valid_frame_after(&bad)? {
                    return Err(Error::corruption(&path, loc, bad.reason));
                }
                opts.warn(&format!(
                    "{}: dropping a torn last record ({loc}: {}); its change never completed",
                    path.display(),
                    bad.reason
                ));
                dropped_tail = Some((path.clone(), loc));
                break;
            }
        }
    }
    if edits == 0 {
        return Err(Error::corruption(
            &path,
            "whole file",
            "manifest holds no records",
        ));
    }
    if version.logs.is_empty() {
        return Err(Error::corruption(
            &path,
            "whole file",
            "manifest names no value-log file",
        ));
    }
    Ok(Recovered {
        version,
        dropped_tail,
    })
}

/// Reads `CURRENT`: `Ok(None)` if there is none.
pub fn read_pointer(
    fs: &dyn FileSystem,
    dir: &Path,
    codec: Arc<dyn BlockCodec>,
) -> Result<Option<u64>> {
    let path = dir.join(POINTER_FILE);
    if !fs.exists(&path) {
        return Ok(None);
    }
    let (bytes, header) = read_pointer_file(fs, &path)?;
    crate::log_reader::check_key(&path, header.key_id, &*codec)?;
    let file = fs
        .open_read(&path)
        .ctx(|| format!("opening {}", path.display()))?;
    let file = LogFile {
        file,
        key_id: header.key_id,
    };
    let start = LogPosition {
        file: header.file_number,
        offset: HEADER_LEN as u64,
        block: POINTER_BLOCK,
    };
    let mut reader = LogReader::new(file, &path, start, bytes.len() as u64, codec);
    let frame = match reader.next()? {
        Ok(Some(f)) if f.kind == BlockKind::Pointer => f,
        Ok(_) => {
            return Err(Error::corruption(
                &path,
                "pointer record at offset 24",
                "pointer record missing",
            ))
        }
        Err(bad) => {
            return Err(Error::corruption(
                &path,
                format!("block {} at offset {}", bad.block, bad.offset),
                bad.reason,
            ))
        }
    };
    let mut d = Decoder::new(&frame.payload);
    match (d.u64(), d.is_empty()) {
        (Some(n), true) if n == header.file_number => Ok(Some(n)),
        _ => Err(Error::corruption(
            &path,
            "pointer record at offset 24",
            "malformed pointer record",
        )),
    }
}

/// Reads the pointer file at `path` and checks by its header that it is
/// one of ours: `NotAStore` if not.
pub fn read_pointer_file(fs: &dyn FileSystem, path: &Path) -> Result<(Vec<u8>, FileHeader)> {
    let bytes = fs
        .read_all(path)
        .ctx(|| format!("reading {}", path.display()))?;
    let header = FileHeader::decode(&bytes).map_err(|e| Error::NotAStore {
        path: path.to_owned(),
        reason: e.to_string(),
    })?;
    if header.kind != FileKind::Pointer {
        return Err(Error::NotAStore {
            path: path.to_owned(),
            reason: format!("expected a pointer file, found a {:?} file", header.kind),
        });
    }
    Ok((bytes, header))
}

/// Points `CURRENT` at manifest `number`, atomically.
pub fn write_pointer(
    fs: &dyn FileSystem,
    dir: &Path,
    number: u64,
    codec: Arc<dyn BlockCodec>,
) -> Result<()> {
    let tmp = dir.join(POINTER_TEMP);
    // The pointer file carries the manifest's number as its own file number
    // and POINTER_BLOCK as its block number: each manifest is pointed at
    // once, so each rewrite seals under a fresh (file, block) pair.
    let mut w = LogWriter::create(fs, &tmp, FileKind::Pointer, number, codec)?;
    w.start_at_block(POINTER_BLOCK);
    let mut payload = Vec::new();
    put_u64(&mut payload, number);
    w.append_group(vec![(BlockKind::Pointer, payload)])?;
    w.sync()?;
    drop(w);
    let cur = dir.join(POINTER_FILE);
    fs.rename(&tmp, &cur)
        .ctx(|| format!("renaming {} to {}", tmp.display(), cur.display()))?;
    fs.sync_dir(dir)
        .ctx(|| format!("syncing directory {}", dir.display()))
}
