//! Salvage: every record of a damaged store that still authenticates,
//! read without opening the store (an open refuses damage) and without
//! writing to it.
//!
//! The state comes from the manifest when one can be read (`CURRENT`, else
//! the newest `MANIFEST-*` that replays), otherwise from the directory
//! listing. Records come from every readable data block of every table and
//! from every readable commit frame of the value log (from the replay
//! pointer on; with no manifest, from every file, since which files were
//! already flushed is unknown). For each key the entry with the highest
//! sequence number wins, deletions included, as in a normal read. Large
//! values are then read through their pointers.
//!
//! What damage costs is listed, never hidden: a lost data block names the
//! key range it held (keys in it may be missing, or come back at an older
//! version from a deeper table), a lost frame names its file and offset, an
//! unreadable value names its key. Memory holds every key and inline value
//! (values of at least `value_threshold` bytes stay on disk until emitted).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::cache::BlockCache;
use crate::codec::{BlockCodec, BlockKind, Crc32cCodec};
use crate::error::{Error, IoContext, Result};
use crate::format::{
    manifest_path, parse_file_name, parse_internal_key, table_path, vlog_path, FileKind, FileType,
    LogPosition, ValuePointer, ValueType, HEADER_LEN,
};
use crate::keys::KeyState;
use crate::log_reader::{open_log_file, LogReader};
use crate::manifest;
use crate::options::Options;
use crate::table_reader::Table;
use crate::version::Version;
use crate::vlog::ValueLog;
use crate::write_batch::decode_commit;

/// What a salvage read and what it could not.
#[derive(Debug, Default)]
pub struct SalvageReport {
    /// Live records handed to the caller.
    pub records: u64,
    pub tables: u64,
    pub table_blocks: u64,
    pub log_files: u64,
    pub log_frames: u64,
    /// Whether the store's state came from a manifest (otherwise from the
    /// directory listing: deleted keys whose deletion was compacted away
    /// may then reappear from old value-log files).
    pub from_manifest: bool,
    /// Everything that could not be read; empty means nothing was lost.
    pub problems: Vec<Error>,
    /// Not damage: the torn tail of a store that was not closed cleanly.
    pub notes: Vec<String>,
}

impl SalvageReport {
    pub fn is_clean(&self) -> bool {
        self.problems.is_empty()
    }
}

impl std::fmt::Display for SalvageReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "salvaged {} records from {} tables ({} blocks) and {} value-log files ({} frames), state from {}",
            self.records,
            self.tables,
            self.table_blocks,
            self.log_files,
            self.log_frames,
            if self.from_manifest { "the manifest" } else { "the directory listing" }
        )?;
        for n in &self.notes {
            write!(f, "\nnote: {n}")?;
        }
        if self.problems.is_empty() {
            write!(f, "\nnothing was lost")
        } else {
            write!(
                f,
                "\n{} problem(s), records there were not read:",
                self.problems.len()
            )?;
            for p in &self.problems {
                write!(f, "\n  {p}")?;
            }
            Ok(())
        }
    }
}

/// Receives each salvaged record (key, value); an error stops the salvage.
pub type Emit<'a> = dyn FnMut(&[u8], &[u8]) -> std::io::Result<()> + 'a;

/// A user-key range, smallest and largest.
type KeyRange = (Vec<u8>, Vec<u8>);

/// The newest entry seen for one user key.
struct Newest {
    seq: u64,
    value_type: ValueType,
    /// The inline value, or an encoded [`ValuePointer`].
    stored: Vec<u8>,
}

#[derive(Default)]
struct Entries(BTreeMap<Vec<u8>, Newest>);

impl Entries {
    fn offer(&mut self, key: &[u8], seq: u64, value_type: ValueType, stored: &[u8]) {
        if self.0.get(key).is_some_and(|e| e.seq >= seq) {
            return;
        }
        self.0.insert(
            key.to_vec(),
            Newest {
                seq,
                value_type,
                stored: stored.to_vec(),
            },
        );
    }
}

/// Reads every record of the store in `dir` that authenticates and hands
/// each live one to `emit` in key order. Fails only when nothing can be
/// read at all (no store, wrong key, store in use) or `emit` fails.
pub fn salvage(dir: &Path, opts: &Options, emit: &mut Emit<'_>) -> Result<SalvageReport> {
    let fs = opts.fs.clone();
    if !fs.exists(dir) {
        return Err(Error::NotFound {
            dir: dir.to_owned(),
        });
    }
    let names = fs.list(dir).ctx(|| format!("listing {}", dir.display()))?;
    if !names.iter().any(|n| parse_file_name(n).is_some()) {
        return Err(Error::NotAStore {
            path: dir.to_owned(),
            reason: "it holds no gvault files".into(),
        });
    }
    // A shared lock, as a read-only open takes: no writer changes the
    // files under us, other readers may run.
    let _lock = crate::dir_lock::acquire(opts, dir, crate::dir_lock::Access::ReadOnly)?;
    let keys = KeyState::load(opts, dir)?.map(Arc::new);
    let (codec, vlog_codec): (Arc<dyn BlockCodec>, Arc<dyn BlockCodec>) = match &keys {
        Some(k) => (k.codec.clone(), k.vlog_codec.clone()),
        None => (Arc::new(Crc32cCodec), Arc::new(Crc32cCodec)),
    };

    let mut report = SalvageReport::default();
    let version = recover_version(&*fs, dir, &names, codec.clone(), opts, &mut report);
    report.from_manifest = version.is_some();

    let mut reader = Reader {
        fs: &*fs,
        dir,
        codec,
        vlog_codec: vlog_codec.clone(),
        cache: Arc::new(BlockCache::new(8 << 20)),
        entries: Entries::default(),
        report,
    };
    for (number, size, range) in table_list(&*fs, dir, &names, version.as_ref()) {
        reader.report.tables += 1;
        reader.read_table(number, size, range);
    }
    for (number, start, sealed) in log_list(&names, version.as_ref()) {
        reader.report.log_files += 1;
        if let Err(e) = reader.read_log(number, start, sealed) {
            reader.report.problems.push(e);
        }
    }
    let Reader {
        entries,
        mut report,
        ..
    } = reader;

    let vlog = ValueLog::new(fs.clone(), dir.to_owned(), vlog_codec, None);
    for (key, e) in &entries.0 {
        let value = match e.value_type {
            ValueType::Deletion => continue,
            ValueType::Inline => e.stored.clone(),
            ValueType::Pointer => {
                let read = ValuePointer::decode(&e.stored)
                    .ok_or_else(|| {
                        Error::corruption(
                            dir,
                            format!("key {}", crate::db::show_key(key)),
                            "malformed value pointer",
                        )
                    })
                    .and_then(|p| vlog.read(&p, key));
                match read {
                    Ok(v) => v,
                    Err(err) => {
                        report.problems.push(err);
                        continue;
                    }
                }
            }
        };
        emit(key, &value).map_err(|e| Error::io("writing salvaged records", e))?;
        report.records += 1;
    }
    Ok(report)
}

/// The manifest's state: from `CURRENT`, else from the newest manifest in
/// the directory that replays. Failures are listed in the report.
fn recover_version(
    fs: &dyn crate::env::FileSystem,
    dir: &Path,
    names: &[String],
    codec: Arc<dyn BlockCodec>,
    opts: &Options,
    report: &mut SalvageReport,
) -> Option<Version> {
    let quiet = Options {
        warning_sink: Arc::new(|_: &str| {}),
        ..opts.clone()
    };
    let mut tried = None;
    match manifest::read_pointer(fs, dir, codec.clone()) {
        Ok(Some(n)) => match manifest::recover(fs, dir, n, codec.clone(), &quiet) {
            Ok(r) => return Some(r.version),
            Err(e) => {
                report.problems.push(e);
                tried = Some(n);
            }
        },
        Ok(None) => {}
        Err(e) => report.problems.push(e),
    }
    let mut manifests: Vec<u64> = names
        .iter()
        .filter_map(|n| match parse_file_name(n) {
            Some((FileType::Manifest, n)) if Some(n) != tried => Some(n),
            _ => None,
        })
        .collect();
    manifests.sort_unstable_by(|a, b| b.cmp(a));
    for n in manifests {
        if let Ok(r) = manifest::recover(fs, dir, n, codec.clone(), &quiet) {
            report.notes.push(format!(
                "state taken from {}, which CURRENT does not name",
                manifest_path(dir, n).display()
            ));
            return Some(r.version);
        }
    }
    None
}

/// Tables to read: (number, size, key range) from the manifest, or every
/// table file with its size on disk.
fn table_list(
    fs: &dyn crate::env::FileSystem,
    dir: &Path,
    names: &[String],
    version: Option<&Version>,
) -> Vec<(u64, u64, Option<KeyRange>)> {
    match version {
        Some(v) => v
            .levels
            .iter()
            .flatten()
            .map(|f| {
                let range = (f.smallest_user().to_vec(), f.largest_user().to_vec());
                (f.number, f.size, Some(range))
            })
            .collect(),
        None => names
            .iter()
            .filter_map(|n| match parse_file_name(n) {
                Some((FileType::Table, number)) => {
                    let size = fs
                        .open_read(&table_path(dir, number))
                        .and_then(|f| f.len())
                        .unwrap_or(0);
                    Some((number, size, None))
                }
                _ => None,
            })
            .collect(),
    }
}

/// A sealed value-log file's size and block count, as the manifest
/// records them.
type Sealed = (u64, u32);

/// Value-log files to replay: (number, start, sealed size), oldest first.
fn log_list(
    names: &[String],
    version: Option<&Version>,
) -> Vec<(u64, LogPosition, Option<Sealed>)> {
    let from_start = |n: u64| LogPosition {
        file: n,
        offset: HEADER_LEN as u64,
        block: 0,
    };
    match version {
        Some(v) => v
            .logs
            .range(v.replay.file..)
            .map(|(n, m)| {
                let start = if *n == v.replay.file {
                    v.replay
                } else {
                    from_start(*n)
                };
                (*n, start, m.sealed)
            })
            .collect(),
        None => {
            let mut logs: Vec<u64> = names
                .iter()
                .filter_map(|n| match parse_file_name(n) {
                    Some((FileType::ValueLog, number)) => Some(number),
                    _ => None,
                })
                .collect();
            logs.sort_unstable();
            logs.into_iter().map(|n| (n, from_start(n), None)).collect()
        }
    }
}

/// What a salvage reads files with, and what it has found so far.
struct Reader<'a> {
    fs: &'a dyn crate::env::FileSystem,
    dir: &'a Path,
    codec: Arc<dyn BlockCodec>,
    vlog_codec: Arc<dyn BlockCodec>,
    cache: Arc<BlockCache>,
    entries: Entries,
    report: SalvageReport,
}

impl Reader<'_> {
    /// Every readable data block of table `number`.
    fn read_table(&mut self, number: u64, size: u64, range: Option<KeyRange>) {
        let (entries, report) = (&mut self.entries, &mut self.report);
        let dir = self.dir;
        let path = table_path(dir, number);
        let table = match Table::open(
            self.fs,
            &path,
            number,
            size,
            self.codec.clone(),
            self.cache.clone(),
        ) {
            Ok(t) => t,
            Err(e) => {
                report.problems.push(with_range(e, &path, range.as_ref()));
                return;
            }
        };
        let mut after: Option<Vec<u8>> = None;
        for i in 0..table.data_blocks() {
            let last = table.last_key_of_block(i).to_vec();
            match table.data_block(i) {
                Ok(block) => {
                    report.table_blocks += 1;
                    for j in 0..block.len() {
                        if let Some(k) = parse_internal_key(block.key(j)) {
                            entries.offer(k.user_key, k.seq, k.value_type, block.value(j));
                        }
                    }
                }
                Err(e) => {
                    let lo = after.as_deref().map(crate::format::user_key);
                    let held = format!(
                        "keys after {} up to {} may be missing or older",
                        lo.map_or("the table's first".into(), crate::db::show_key),
                        crate::db::show_key(crate::format::user_key(&last))
                    );
                    report.problems.push(annotate(e, &path, &held));
                }
            }
            after = Some(last);
        }
    }
}

fn with_range(e: Error, path: &Path, range: Option<&KeyRange>) -> Error {
    let held = match range {
        Some((lo, hi)) => format!(
            "the whole table is unreadable; keys {} to {} may be missing or older",
            crate::db::show_key(lo),
            crate::db::show_key(hi)
        ),
        None => "the whole table is unreadable".into(),
    };
    annotate(e, path, &held)
}

/// Adds what the damage cost to a corruption error's reason.
fn annotate(e: Error, path: &Path, held: &str) -> Error {
    match e {
        Error::Corruption {
            file,
            location,
            reason,
        } => Error::Corruption {
            file,
            location,
            reason: format!("{reason}; {held}"),
        },
        other => Error::corruption(path, "whole file", format!("{other}; {held}")),
    }
}

impl Reader<'_> {
    /// Every readable commit frame of value-log file `number` from
    /// `start`, up to its sealed size if it has one.
    fn read_log(&mut self, number: u64, start: LogPosition, sealed: Option<Sealed>) -> Result<()> {
        let (fs, dir, codec) = (self.fs, self.dir, self.vlog_codec.clone());
        let (entries, report) = (&mut self.entries, &mut self.report);
        let path: PathBuf = vlog_path(dir, number);
        let file = open_log_file(fs, &path, FileKind::ValueLog, number, &*codec)?;
        let len = file
            .len()
            .ctx(|| format!("reading size of {}", path.display()))?;
        if let Some(Err(e)) = sealed.map(|s| crate::recovery::check_log_len(&path, len, s)) {
            report.problems.push(e);
        }
        let end = sealed.map_or(len, |(size, _)| size.min(len));
        let mut reader = LogReader::new(file, &path, start, end, codec);
        loop {
            match reader.next()? {
                Ok(None) => return Ok(()),
                Ok(Some(frame)) => {
                    report.log_frames += 1;
                    if frame.kind != BlockKind::LogCommit {
                        continue;
                    }
                    let Some(records) = decode_commit(&frame.payload) else {
                        report.problems.push(Error::corruption(
                            &path,
                            format!(
                                "block {} at offset {}",
                                frame.handle.block, frame.handle.offset
                            ),
                            "malformed commit record",
                        ));
                        continue;
                    };
                    for r in records {
                        match r.frame {
                            Some(h) => {
                                let ptr = ValuePointer {
                                    file: number,
                                    frame: h,
                                };
                                entries.offer(r.key, r.seq, r.value_type, &ptr.encode());
                            }
                            None => entries.offer(r.key, r.seq, r.value_type, r.value),
                        }
                    }
                }
                Err(bad) => {
                    let loc = format!("block {} at offset {}", bad.block, bad.offset);
                    if reader.resync_after(&bad)? {
                        report.problems.push(Error::corruption(
                            &path,
                            loc,
                            format!("{}; the records of this group are lost", bad.reason),
                        ));
                        continue;
                    }
                    if sealed.is_none() && bad.truncated {
                        report.notes.push(format!(
                            "{}: the last {} bytes are a torn append ({loc}) that never completed",
                            path.display(),
                            end - bad.offset
                        ));
                    } else {
                        report.problems.push(Error::corruption(
                            &path,
                            loc,
                            format!(
                                "{}; records from here to the end of the file are lost",
                                bad.reason
                            ),
                        ));
                    }
                    return Ok(());
                }
            }
        }
    }
}
