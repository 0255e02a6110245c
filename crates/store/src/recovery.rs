//! Opening a store: lock, read CURRENT and the manifest, replay the value
//! log from the replay pointer into a fresh memtable (cutting a torn tail),
//! remove files no version names, and start a new manifest. `load` is the
//! part a read-only open (`readonly.rs`) shares.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::codec::{BlockCodec, BlockKind, Crc32cCodec};
use crate::db::DbInner;
use crate::dir_lock::{self, Access};
use crate::env::FileLock;
use crate::error::{Error, IoContext, Result};
use crate::format::{
    parse_file_name, table_path, vlog_path, FileKind, FileType, LogPosition, ValuePointer,
    HEADER_LEN, LOCK_FILE, POINTER_FILE,
};
use crate::keys::KeyState;
use crate::log_reader::{open_log_file, LogReader};
use crate::log_writer::LogWriter;
use crate::manifest::{self, Manifest};
use crate::memtable::MemTable;
use crate::options::Options;
use crate::version::{Version, VersionEdit};
use crate::write_batch::decode_commit;

/// What both kinds of open find before they part: the lock, the keys, the
/// recovered version and the value log replayed into a memtable.
pub(crate) struct Loaded {
    pub lock: Option<Box<dyn FileLock>>,
    /// The directory's entries once the store exists.
    pub names: Vec<String>,
    /// The largest file number found in the directory before anything was
    /// removed.
    pub max_on_disk: u64,
    pub keys: Option<Arc<KeyState>>,
    pub codec: Arc<dyn BlockCodec>,
    pub vlog_codec: Arc<dyn BlockCodec>,
    pub version: Version,
    /// The manifest `CURRENT` names; `None` for a store created just now.
    pub manifest: Option<u64>,
    pub mem: MemTable,
    pub replayed: ReplayEnd,
}

/// Checks `dir`, locks it and recovers the store in it (creating an empty
/// one for a read-write open with `create_if_missing`). A read-only open
/// writes nothing here: a torn tail of the value log is left in place and
/// not replayed.
pub(crate) fn load(dir: &Path, opts: &Options, access: Access) -> Result<Loaded> {
    opts.validate()?;
    let fs = opts.fs.clone();
    let create = access == Access::ReadWrite && opts.create_if_missing;
    check_before_lock(opts, dir, create)?;
    let lock = dir_lock::acquire(opts, dir, access)?;
    let mut names = fs.list(dir).ctx(|| format!("listing {}", dir.display()))?;
    // Never reuse a number, not even one of a file removed later: a file
    // number is half of every block's nonce.
    let max_on_disk = names
        .iter()
        .filter_map(|n| parse_file_name(n))
        .map(|(_, n)| n)
        .max()
        .unwrap_or(0);

    // Keys first: a missing or wrong key fails here, before any data file
    // is read.
    let mut keys = if fs.exists(&dir.join(POINTER_FILE)) {
        KeyState::load(opts, dir)?.map(Arc::new)
    } else {
        None
    };
    let mut codec = codec_for(&keys);
    let mut dropped_tail = None;
    let pointer = manifest::read_pointer(&*fs, dir, codec.clone())?;
    let mut version = match pointer {
        Some(number) => {
            if keys.is_none() && opts.encryption.is_some() {
                return Err(Error::InvalidArgument(format!(
                    "store {} is not encrypted (it has no key registry); open it without a key",
                    dir.display()
                )));
            }
            if opts.error_if_exists {
                return Err(Error::InvalidArgument(format!(
                    "a store already exists in {}",
                    dir.display()
                )));
            }
            let r = manifest::recover(&*fs, dir, number, codec.clone(), opts)?;
            dropped_tail = r.dropped_tail;
            r.version
        }
        None => {
            let leftovers = unfinished_init_leftovers(opts, dir, &names)?;
            if !create {
                return Err(Error::NotFound {
                    dir: dir.to_owned(),
                });
            }
            for p in leftovers {
                opts.warn(&format!(
                    "removing {}, left by a store creation that did not finish",
                    p.display()
                ));
                fs.remove(&p).ctx(|| format!("removing {}", p.display()))?;
            }
            if let Some(enc) = &opts.encryption {
                keys = Some(Arc::new(KeyState::create(opts, dir, enc)?));
                codec = codec_for(&keys);
            }
            let v = create_empty(opts, dir, vlog_codec_for(&keys))?;
            names = fs.list(dir).ctx(|| format!("listing {}", dir.display()))?;
            v
        }
    };

    // A torn edit is never followed by a deletion, so with a dropped tail a
    // missing file means the manifest lost a record that was complete.
    let missing = |p: PathBuf, what: &str| match &dropped_tail {
        Some((manifest, loc)) => {
            let reason = format!(
                "its last record was damaged and dropped; the state before it names {}, which is missing",
                p.display()
            );
            Error::corruption(manifest, loc, reason)
        }
        None => {
            let reason = format!("{what} named by the manifest is missing");
            Error::corruption(p, "whole file", reason)
        }
    };
    for n in version.table_numbers() {
        let p = table_path(dir, n);
        if !fs.exists(&p) {
            return Err(missing(p, "table"));
        }
    }
    for meta in version.logs.values() {
        let p = vlog_path(dir, meta.number);
        if !fs.exists(&p) {
            return Err(missing(p, "value-log file"));
        }
        check_sealed_size(&*fs, &p, meta)?;
    }

    if let Some(p) = unlisted_log_with_records(&*fs, dir, &names, &version)? {
        return Err(match &dropped_tail {
            Some((manifest, loc)) => Error::corruption(
                manifest,
                loc,
                format!(
                    "the last record was damaged and dropped; {} holds records the state before it does not list",
                    p.display()
                ),
            ),
            None => Error::corruption(
                p,
                "whole file",
                "value-log file holds records but the manifest does not list it (manifest damaged?)",
            ),
        });
    }
    let mem = MemTable::new();
    let vlog_codec = vlog_codec_for(&keys);
    let replayed = replay(opts, dir, &version, &mem, vlog_codec.clone(), access)?;
    version.last_sequence = version.last_sequence.max(replayed.max_seq);
    Ok(Loaded {
        lock,
        names,
        max_on_disk,
        keys,
        codec,
        vlog_codec,
        version,
        manifest: pointer,
        mem,
        replayed,
    })
}

/// Decides, before `LOCK` exists, whether `dir` may hold a store, so that a
/// failed open leaves a directory that is not one as it found it. Creates
/// the directory when `create` allows. A store being created meanwhile by
/// another process shows its `CURRENT` by the time a check fails, and is
/// then let through to the lock.
fn check_before_lock(opts: &Options, dir: &Path, create: bool) -> Result<()> {
    let fs = &*opts.fs;
    if !fs.exists(dir) {
        if !create {
            return Err(Error::NotFound {
                dir: dir.to_owned(),
            });
        }
        return fs
            .create_dir_all(dir)
            .ctx(|| format!("creating directory {}", dir.display()));
    }
    let pointer = dir.join(POINTER_FILE);
    if fs.exists(&pointer) {
        // Someone else's `CURRENT` (a LevelDB directory, say) is refused
        // here too. Ours is replaced by a rename, so it is read whole.
        return manifest::read_pointer_file(fs, &pointer).map(|_| ());
    }
    let names = match fs.list(dir) {
        Ok(names) => names,
        Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => {
            return Err(Error::NotAStore {
                path: dir.to_owned(),
                reason: "it is a file, not a directory".into(),
            })
        }
        Err(e) => return Err(Error::io(format!("listing {}", dir.display()), e)),
    };
    let verdict = unfinished_init_leftovers(opts, dir, &names).and_then(|_| match create {
        true => Ok(()),
        false => Err(Error::NotFound {
            dir: dir.to_owned(),
        }),
    });
    match verdict {
        Err(_) if fs.exists(&pointer) => Ok(()),
        v => v,
    }
}

pub fn open(dir: &Path, opts: Options) -> Result<DbInner> {
    let Loaded {
        lock,
        names,
        max_on_disk,
        keys,
        codec,
        vlog_codec,
        mut version,
        manifest: _,
        mem,
        replayed,
    } = load(dir, &opts, Access::ReadWrite)?;
    let fs = opts.fs.clone();
    version.next_file_number = version.next_file_number.max(max_on_disk + 1);
    if keys.is_some() {
        // A file whose directory entry a power loss dropped leaves no trace
        // for `max_on_disk`, but its sealed blocks may still lie on the
        // device: never seal under its number again.
        version.next_file_number += FILE_NUMBER_GAP;
    }

    // Writes go to a new value-log file: appending after a cut tail would
    // reuse the (file, block) pairs of the cut frames, which must never
    // seal two different contents once blocks are encrypted.
    let old = replayed.end;
    let head = version.next_file_number;
    version.next_file_number += 1;
    let head_path = vlog_path(dir, head);
    let log = LogWriter::create(
        &*fs,
        &head_path,
        FileKind::ValueLog,
        head,
        vlog_codec.clone(),
    )?;
    fs.sync_dir(dir)
        .ctx(|| format!("syncing directory {}", dir.display()))?;
    let head_start = log.position();
    let mut edit = VersionEdit {
        added_logs: vec![head],
        sealed_logs: vec![(old.file, old.offset, old.block)],
        ..Default::default()
    };
    if mem.is_empty() {
        edit.replay = Some(head_start);
    }
    version = version
        .apply(&edit)
        .map_err(|r| Error::corruption(&head_path, "new value log", r))?;

    // A fresh manifest keeps recovery short and drops any torn tail.
    let number = version.next_file_number;
    version.next_file_number += 1;
    let m = Manifest::create(&*fs, dir, number, &version, codec.clone())?;
    manifest::write_pointer(&*fs, dir, number, codec.clone())?;
    remove_orphans(&opts, dir, &names, &version, number);

    let inner = DbInner::new(
        dir.to_owned(),
        opts,
        codec,
        vlog_codec,
        keys,
        version,
        Some(log),
        m,
        lock,
    );
    if !mem.is_empty() {
        // Flush what was replayed, as LevelDB does, so the next open does not
        // replay it again and value-log files do not pile up.
        inner.push_immutable(mem, head_start);
        crate::background::flush_oldest(&inner)?;
    }
    // Replayed files that held no value frames are now wholly in tables.
    let dead: Vec<u64> = replayed
        .files
        .iter()
        .filter(|f| !f.has_values)
        .map(|f| f.number)
        .collect();
    if !dead.is_empty() {
        inner.log_and_apply(VersionEdit {
            deleted_logs: dead.clone(),
            ..Default::default()
        })?;
        for n in dead {
            let _ = inner.fs.remove(&vlog_path(dir, n));
        }
    }
    Ok(inner)
}

/// A sealed value-log file must hold at least the bytes the manifest
/// recorded when it was sealed (at rotation, at open, at a clean close):
/// any shortening is damage, never a torn tail.
pub(crate) fn check_sealed_size(
    fs: &dyn crate::env::FileSystem,
    path: &Path,
    meta: &crate::version::LogMeta,
) -> Result<()> {
    let Some(sealed) = meta.sealed else {
        return Ok(());
    };
    let len = fs
        .open_read(path)
        .and_then(|f| f.len())
        .ctx(|| format!("reading size of {}", path.display()))?;
    check_log_len(path, len, sealed)
}

/// A value-log file of `len` bytes that the manifest records as `size`
/// bytes in `blocks` blocks: shorter, it lost its tail.
pub(crate) fn check_log_len(path: &Path, len: u64, (size, blocks): (u64, u32)) -> Result<()> {
    if len >= size {
        return Ok(());
    }
    Err(Error::corruption(
        path,
        format!("end of file at {len}"),
        format!(
            "the manifest records {size} bytes ({blocks} blocks); {} bytes of its tail are missing",
            size - len
        ),
    ))
}

/// File numbers skipped at each open of an encrypted store: more than any
/// flush, compaction and GC pass can allocate between two manifest edits.
const FILE_NUMBER_GAP: u64 = 1 << 16;

fn codec_for(keys: &Option<Arc<KeyState>>) -> Arc<dyn BlockCodec> {
    match keys {
        Some(k) => k.codec.clone(),
        None => Arc::new(Crc32cCodec),
    }
}

/// What value-log files use: the store's codec, or CRC32C in an
/// index-only store.
fn vlog_codec_for(keys: &Option<Arc<KeyState>>) -> Arc<dyn BlockCodec> {
    match keys {
        Some(k) => k.vlog_codec.clone(),
        None => Arc::new(Crc32cCodec),
    }
}

fn create_empty(opts: &Options, dir: &Path, vlog_codec: Arc<dyn BlockCodec>) -> Result<Version> {
    let n = 1;
    LogWriter::create(
        &*opts.fs,
        &vlog_path(dir, n),
        FileKind::ValueLog,
        n,
        vlog_codec,
    )?;
    let edit = VersionEdit {
        last_sequence: Some(0),
        next_file_number: Some(n + 1),
        replay: Some(LogPosition {
            file: n,
            offset: HEADER_LEN as u64,
            block: 0,
        }),
        added_logs: vec![n],
        ..Default::default()
    };
    Version::default()
        .apply(&edit)
        .map_err(|r| Error::InvalidArgument(format!("creating an empty store: {r}")))
}

pub(crate) struct ReplayEnd {
    /// Just after the last complete group of the head file.
    pub end: LogPosition,
    max_seq: u64,
    files: Vec<ReplayedFile>,
}

struct ReplayedFile {
    number: u64,
    /// Whether the file may hold values that tables point to.
    has_values: bool,
}

/// Replays every value-log file from the replay pointer into `mem`. A
/// torn tail of the head file is cut, or for a read-only open left alone.
pub(crate) fn replay(
    opts: &Options,
    dir: &Path,
    version: &Version,
    mem: &MemTable,
    codec: Arc<dyn BlockCodec>,
    access: Access,
) -> Result<ReplayEnd> {
    let fs = &*opts.fs;
    let head = version.head_log().expect("recover checks for a value log");
    let mut max_seq = 0;
    let mut end = LogPosition::default();
    let mut files = Vec::new();
    for meta in version.logs.range(version.replay.file..).map(|(_, m)| *m) {
        let n = meta.number;
        let path = vlog_path(dir, n);
        let file = open_log_file(fs, &path, FileKind::ValueLog, n, &*codec)?;
        let len = file
            .len()
            .ctx(|| format!("reading size of {}", path.display()))?;
        // `open` checked that a sealed file is at least its recorded size.
        let file_end = meta.sealed.map_or(len, |(size, _)| size);
        let start = if n == version.replay.file {
            version.replay
        } else {
            LogPosition {
                file: n,
                offset: HEADER_LEN as u64,
                block: 0,
            }
        };
        if start.offset > file_end {
            return Err(Error::corruption(
                &path,
                format!("offset {}", start.offset),
                "replay pointer lies past the end of the file",
            ));
        }
        let mut reader = LogReader::new(file, &path, start, file_end, codec.clone());
        // End of the last complete group: where a torn tail is cut.
        let mut group_end = reader.position();
        let mut pending_values = 0u32;
        // Frames before the replay pointer were not read: assume values.
        let mut has_values = start.offset > HEADER_LEN as u64;
        let mut failure = None;
        loop {
            match reader.next()? {
                Ok(None) => break,
                Ok(Some(frame)) if frame.kind == BlockKind::LogValue => {
                    pending_values += 1;
                    has_values = true;
                }
                Ok(Some(frame)) if frame.kind == BlockKind::LogCommit => {
                    let loc = format!(
                        "block {} at offset {}",
                        frame.handle.block, frame.handle.offset
                    );
                    let recs = decode_commit(&frame.payload)
                        .ok_or_else(|| Error::corruption(&path, &loc, "malformed commit record"))?;
                    for r in recs {
                        match r.frame {
                            Some(h) => {
                                if h.offset >= frame.handle.offset || h.block >= frame.handle.block
                                {
                                    return Err(Error::corruption(
                                        &path,
                                        &loc,
                                        "value pointer does not precede its commit",
                                    ));
                                }
                                let ptr = ValuePointer { file: n, frame: h };
                                mem.add(r.seq, r.value_type, r.key, &ptr.encode());
                            }
                            None => mem.add(r.seq, r.value_type, r.key, r.value),
                        }
                        max_seq = max_seq.max(r.seq);
                    }
                    pending_values = 0;
                    group_end = reader.position();
                }
                Ok(Some(frame)) => {
                    return Err(Error::corruption(
                        &path,
                        format!(
                            "block {} at offset {}",
                            frame.handle.block, frame.handle.offset
                        ),
                        format!("unexpected {:?} block in a value log", frame.kind),
                    ))
                }
                Err(bad) => {
                    failure = Some(bad);
                    break;
                }
            }
        }
        files.push(ReplayedFile {
            number: n,
            has_values,
        });
        // Only the head of a store that was not closed cleanly can end in
        // a torn append; a sealed file's every byte up to its recorded size
        // was written and synced.
        let may_be_torn = n == head && meta.sealed.is_none();
        if let Some(bad) = &failure {
            let loc = format!("block {} at offset {}", bad.block, bad.offset);
            if !may_be_torn || reader.valid_frame_after(bad)? {
                return Err(Error::corruption(&path, loc, bad.reason.clone()));
            }
        } else if pending_values > 0 && !may_be_torn {
            return Err(Error::corruption(
                &path,
                format!("offset {}", group_end.offset),
                "value frames without their commit record",
            ));
        }
        if n == head {
            if group_end.offset < len {
                let why = failure
                    .map(|b| format!("block {} at offset {}: {}", b.block, b.offset, b.reason))
                    .unwrap_or_else(|| "value frames without their commit record".into());
                let what = if meta.sealed.is_some() {
                    "bytes past the size recorded at the last clean close".to_string()
                } else {
                    format!(
                        "an append that never completed: {pending_values} value frame(s) and no readable commit record, so none of its records (sequence {} on) was acknowledged as synced",
                        max_seq.max(version.last_sequence).saturating_add(1)
                    )
                };
                let action = match access {
                    Access::ReadWrite => "dropping",
                    Access::ReadOnly => "skipping (a read-only open leaves them on disk)",
                };
                opts.warn(&format!(
                    "{}: {action} {} bytes after offset {} (block {}): {what}; at the cut: {why}",
                    path.display(),
                    len - group_end.offset,
                    group_end.offset,
                    group_end.block,
                ));
                if access == Access::ReadWrite {
                    fs.truncate(&path, group_end.offset)
                        .ctx(|| format!("cutting the torn tail of {}", path.display()))?;
                }
            }
            end = group_end;
        }
    }
    if end.file != head {
        return Err(Error::corruption(
            vlog_path(dir, version.replay.file),
            "replay pointer",
            "replay pointer names a value-log file the manifest does not list",
        ));
    }
    Ok(ReplayEnd {
        end,
        max_seq,
        files,
    })
}

/// Without CURRENT the directory must be empty, or hold what a creation
/// cut short leaves: our files with no record in any value log (nothing
/// was ever acknowledged), which the caller removes. Anything else is
/// refused.
fn unfinished_init_leftovers(opts: &Options, dir: &Path, names: &[String]) -> Result<Vec<PathBuf>> {
    let fs = &*opts.fs;
    let mut leftovers = Vec::new();
    for name in names.iter().filter(|n| n.as_str() != LOCK_FILE) {
        let path = dir.join(name);
        let empty_log = matches!(parse_file_name(name), Some((FileType::ValueLog, _)))
            && fs
                .open_read(&path)
                .and_then(|f| f.len())
                .is_ok_and(|len| len <= HEADER_LEN as u64);
        let harmless = matches!(
            parse_file_name(name),
            Some((
                FileType::Manifest
                    | FileType::PointerTemp
                    | FileType::KeyRegistry
                    | FileType::KeyRegistryTemp
                    | FileType::ResealTemp,
                _
            ))
        );
        if !(empty_log || harmless) {
            let reason = if parse_file_name(name).is_some() {
                format!("it holds gvault files (such as {name}) but no CURRENT pointer file; the store is damaged")
            } else {
                format!(
                    "the directory is not empty (found {name:?}) and holds no CURRENT pointer file"
                )
            };
            return Err(Error::NotAStore {
                path: dir.to_owned(),
                reason,
            });
        }
        leftovers.push(path);
    }
    Ok(leftovers)
}

/// A value-log file newer than the manifest's head is normal after a crash
/// between creating it and recording it (it then holds only its header).
/// One holding records means the manifest lost an edit: refuse to open
/// rather than drop acknowledged writes.
fn unlisted_log_with_records(
    fs: &dyn crate::env::FileSystem,
    dir: &Path,
    names: &[String],
    v: &Version,
) -> Result<Option<PathBuf>> {
    let head = v.head_log().unwrap_or(0);
    for name in names {
        if let Some((FileType::ValueLog, n)) = parse_file_name(name) {
            if n > head && !v.logs.contains_key(&n) {
                let p = dir.join(name);
                let f = fs
                    .open_read(&p)
                    .ctx(|| format!("opening {}", p.display()))?;
                let len = f.len().ctx(|| format!("reading size of {}", p.display()))?;
                if len > HEADER_LEN as u64 {
                    return Ok(Some(p));
                }
            }
        }
    }
    Ok(None)
}

/// Removes files of ours that the recovered version does not name: tables
/// from unfinished flushes or compactions, old manifests, a stale temporary
/// pointer file. Foreign files are left alone.
fn remove_orphans(opts: &Options, dir: &Path, names: &[String], v: &Version, manifest: u64) {
    let tables: std::collections::HashSet<u64> = v.table_numbers().collect();
    for name in names {
        let Some((t, n)) = parse_file_name(name) else {
            continue;
        };
        let orphan = match t {
            FileType::Table => !tables.contains(&n),
            FileType::ValueLog => !v.logs.contains_key(&n),
            FileType::Manifest => n != manifest,
            FileType::PointerTemp | FileType::KeyRegistryTemp | FileType::ResealTemp => true,
            FileType::Pointer | FileType::Lock | FileType::KeyRegistry => false,
        };
        if orphan {
            let p = dir.join(name);
            if let Err(e) = opts.fs.remove(&p) {
                opts.warn(&format!(
                    "could not remove unused file {}: {e}",
                    p.display()
                ));
            }
        }
    }
}
