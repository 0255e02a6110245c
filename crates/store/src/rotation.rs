//! Online key rotation. `rotate_data_key` adds a data key that every new
//! file uses; the re-encryption pass then rewrites each live file still under
//! an older key (value-log head rolled over, older value-log files emptied
//! by GC, tables rewritten, manifest rewritten) at a bounded byte rate, and
//! retires keys no file names any more. Every step is one manifest edit, so
//! a crash leaves the store consistent and the next pass resumes where this
//! one stopped (files already rewritten are under the current key).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use crate::codec::BlockCodec;
use crate::compaction::{self, Compaction, OutputWriter};
use crate::db::DbInner;
use crate::error::{Error, IoContext, Result};
use crate::format::{manifest_path, table_path, vlog_path, FileHeader, HEADER_LEN};
use crate::iterator::InternalIterator;
use crate::keys::{keys_path, Encryption, KeyState};
use crate::table_reader::TableIterator;
use crate::version::VersionEdit;

/// Which live files use which data key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyStatus {
    /// The key new files are sealed under.
    pub current: u32,
    /// Every key in the registry, with the live files sealed under it.
    pub keys: BTreeMap<u32, Vec<String>>,
    /// Keys a re-encryption pass dropped from the registry (ids are never
    /// reused, so every id below the next one that is not in `keys`).
    pub retired: Vec<u32>,
}

impl KeyStatus {
    /// Files under a key other than the current one.
    pub fn stale_files(&self) -> usize {
        self.keys
            .iter()
            .filter(|(k, _)| **k != self.current)
            .map(|(_, f)| f.len())
            .sum()
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReencryptReport {
    pub tables_rewritten: u64,
    pub logs_rewritten: u64,
    pub manifests_rewritten: u64,
    pub bytes_read: u64,
    pub keys_retired: Vec<u32>,
}

fn key_state(inner: &DbInner) -> Result<&KeyState> {
    inner.keys.as_deref().ok_or_else(|| {
        Error::InvalidArgument(format!("store {} is not encrypted", inner.dir.display()))
    })
}

fn header_key(inner: &DbInner, path: &std::path::Path) -> Result<u32> {
    let f = inner
        .fs
        .open_read(path)
        .ctx(|| format!("opening {}", path.display()))?;
    let mut b = [0u8; HEADER_LEN];
    f.read_exact_at(&mut b, 0)
        .ctx(|| format!("reading header of {}", path.display()))?;
    FileHeader::decode(&b)
        .map(|h| h.key_id)
        .map_err(|e| Error::corruption(path, "file header at offset 0", e.to_string()))
}

/// Every live file (manifest, value logs, tables, and files waiting for
/// deletion that readers may still open) with its data key.
fn live_files(inner: &DbInner) -> Result<Vec<(String, u32)>> {
    let (v, pending_tables, pending_logs) = {
        let st = inner.state.lock();
        (
            st.current.clone(),
            st.obsolete_tables.clone(),
            st.obsolete_logs.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
        )
    };
    let manifest = inner.manifest.lock().number();
    let mut paths = vec![manifest_path(&inner.dir, manifest)];
    paths.extend(
        v.logs
            .keys()
            .chain(&pending_logs)
            .map(|n| vlog_path(&inner.dir, *n)),
    );
    paths.extend(
        v.table_numbers()
            .chain(pending_tables)
            .map(|n| table_path(&inner.dir, n)),
    );
    let mut out = Vec::new();
    for p in paths {
        if !inner.fs.exists(&p) {
            continue; // deleted meanwhile
        }
        let name = p.file_name().map(|n| n.to_string_lossy().into_owned());
        out.push((name.unwrap_or_default(), header_key(inner, &p)?));
    }
    Ok(out)
}

pub fn status(inner: &DbInner) -> Result<KeyStatus> {
    let ks = key_state(inner)?;
    let (current, ids, retired): (u32, Vec<u32>, Vec<u32>) = {
        let r = ks.registry.lock();
        let retired = (1..r.next_id).filter(|i| !r.keys.contains_key(i)).collect();
        (r.current, r.keys.keys().copied().collect(), retired)
    };
    let mut keys: BTreeMap<u32, Vec<String>> = ids.into_iter().map(|i| (i, Vec::new())).collect();
    for (name, k) in live_files(inner)? {
        keys.entry(k).or_default().push(name);
    }
    Ok(KeyStatus {
        current,
        keys,
        retired,
    })
}

/// Adds a data key and makes new files use it; returns its id.
pub fn rotate_data_key(inner: &DbInner) -> Result<u32> {
    let ks = key_state(inner)?;
    let mut r = ks.registry.lock();
    let before = (r.current, r.next_id);
    let id = r.add_key();
    if let Err(e) = r.save(&*inner.fs, &inner.dir, &*ks.backend) {
        r.keys.remove(&id);
        (r.current, r.next_id) = before;
        return Err(e);
    }
    ks.codec.set_keys(r.current, r.key_list());
    Ok(id)
}

/// Rewraps the key registry under a new master key; no data file changes.
pub fn rotate_master_key(inner: &DbInner, new: &Encryption) -> Result<()> {
    let ks = key_state(inner)?;
    let mut r = ks.registry.lock();
    r.rewrap(new, &keys_path(&inner.dir))?;
    r.save(&*inner.fs, &inner.dir, &*ks.backend)
}

/// Sleeps as needed to keep `bytes` since `start` under `rate` bytes/s.
struct Throttle {
    start: Instant,
    bytes: u64,
    rate: u64,
}

impl Throttle {
    fn charge(&mut self, bytes: u64) {
        self.bytes += bytes;
        let due = Duration::from_secs_f64(self.bytes as f64 / self.rate as f64);
        if let Some(wait) = due.checked_sub(self.start.elapsed()) {
            std::thread::sleep(wait);
        }
    }
}

fn file_size(inner: &DbInner, p: &std::path::Path) -> u64 {
    inner.fs.open_read(p).and_then(|f| f.len()).unwrap_or(0)
}

/// The re-encryption pass; `flush` flushes the memtable (a `Store` method).
pub fn reencrypt(
    inner: &DbInner,
    flush: &dyn Fn() -> Result<()>,
    rate: u64,
) -> Result<ReencryptReport> {
    let ks = key_state(inner)?;
    let current = ks.codec.key_id();
    let mut report = ReencryptReport::default();
    let mut throttle = Throttle {
        start: Instant::now(),
        bytes: 0,
        rate: rate.max(4096),
    };
    let stopping = || inner.state.lock().shutting_down;

    // 1. The value-log head: start a new file, then flush so that every
    //    older file lies behind the replay pointer.
    {
        let mut guard = inner.log.lock();
        let log = guard
            .as_mut()
            .ok_or_else(|| Error::Closed("store is closed".into()))?;
        if header_key(inner, &vlog_path(&inner.dir, log.file_number()))? != current {
            inner.rotate_log(log)?;
        }
    }
    flush()?;
    // A flush of an empty memtable moves nothing: with every entry already
    // in tables, move the replay pointer to the head here, or the older
    // file holding it would never be rewritten.
    {
        let guard = inner.log.lock();
        let log = guard
            .as_ref()
            .ok_or_else(|| Error::Closed("store is closed".into()))?;
        let idle = {
            let st = inner.state.lock();
            st.mem.is_empty() && st.imm.is_empty() && st.current.replay.file < log.file_number()
        };
        if idle {
            inner.log_and_apply(VersionEdit {
                replay: Some(log.position()),
                ..Default::default()
            })?;
        }
    }

    // 2. Older value-log files: GC rewrites their live values at the head.
    let old_logs: Vec<u64> = {
        let v = inner.state.lock().current.clone();
        v.logs
            .keys()
            .copied()
            .filter(|n| *n < v.replay.file)
            .collect()
    };
    for n in old_logs {
        if stopping() {
            return Ok(report);
        }
        let p = vlog_path(&inner.dir, n);
        if header_key(inner, &p)? == current {
            continue;
        }
        throttle.charge(file_size(inner, &p));
        report.bytes_read += file_size(inner, &p);
        crate::gc::drop_file(inner, n)?;
        report.logs_rewritten += 1;
    }

    // 3. Tables. Level 0 is ordered by file number, so its tables are not
    //    rewritten one by one: the whole level is compacted into level 1.
    {
        let _guard = inner.compaction_lock.lock();
        let v = inner.state.lock().current.clone();
        let mut stale_l0 = false;
        for f in &v.levels[0] {
            stale_l0 |= header_key(inner, &table_path(&inner.dir, f.number))? != current;
        }
        if stale_l0 {
            let first = v.levels[0].clone();
            let (lo, hi) = compaction::key_range(&first);
            let below = v.overlapping(1, Some(&lo), Some(&hi));
            let bytes: u64 = first.iter().chain(&below).map(|f| f.size).sum();
            throttle.charge(bytes);
            report.bytes_read += bytes;
            report.tables_rewritten += (first.len() + below.len()) as u64;
            compaction::run(
                inner,
                &Compaction {
                    level: 0,
                    inputs: [first, below],
                },
            )?;
        }
    }
    let levels = inner.state.lock().current.levels.clone();
    for (level, files) in levels.iter().enumerate().skip(1) {
        for f in files {
            if stopping() {
                return Ok(report);
            }
            let _guard = inner.compaction_lock.lock();
            let still_live = inner.state.lock().current.levels[level]
                .iter()
                .any(|g| g.number == f.number);
            if !still_live || header_key(inner, &table_path(&inner.dir, f.number))? == current {
                continue;
            }
            throttle.charge(f.size);
            report.bytes_read += f.size;
            rewrite_table(inner, level, f)?;
            report.tables_rewritten += 1;
        }
    }

    // 4. The manifest (and with it the pointer file).
    {
        let mut m = inner.manifest.lock();
        if header_key(inner, &manifest_path(&inner.dir, m.number()))? != current {
            let v = inner.state.lock().current.clone();
            inner.rewrite_manifest(&mut m, &v)?;
            report.manifests_rewritten += 1;
        }
    }

    inner.delete_obsolete_files();
    report.keys_retired = retire_unused(inner)?;
    Ok(report)
}

/// Rewrites one table of level >= 1 in place: same entries, same level,
/// new file number and key. Caller holds the compaction lock.
fn rewrite_table(inner: &DbInner, level: usize, f: &crate::version::FileMeta) -> Result<()> {
    let mut it = TableIterator::new(inner.tables.get(f)?);
    let mut out = OutputWriter::new(inner);
    it.seek_to_first();
    while it.valid() {
        out.add(it.key(), it.value());
        it.next();
    }
    it.status()?;
    let mut edit = VersionEdit::default();
    edit.deleted_tables.push((level, f.number));
    for t in out.finish()? {
        edit.added_tables.push((level, t));
    }
    inner.log_and_apply(edit)?;
    inner.state.lock().obsolete_tables.push(f.number);
    inner.delete_obsolete_files();
    Ok(())
}

/// Drops from the registry every key but the current one that no live file
/// (nor one waiting for deletion) names.
fn retire_unused(inner: &DbInner) -> Result<Vec<u32>> {
    let ks = key_state(inner)?;
    let used: BTreeSet<u32> = live_files(inner)?.into_iter().map(|(_, k)| k).collect();
    let mut r = ks.registry.lock();
    let current = r.current;
    let retired: Vec<u32> = r
        .keys
        .keys()
        .copied()
        .filter(|k| *k != current && !used.contains(k))
        .collect();
    if retired.is_empty() {
        return Ok(retired);
    }
    let kept = r.keys.clone();
    for k in &retired {
        r.keys.remove(k);
    }
    if let Err(e) = r.save(&*inner.fs, &inner.dir, &*ks.backend) {
        r.keys = kept;
        return Err(e);
    }
    // The codec keeps retired keys until the store closes: a reader that
    // opened a file before its deletion may still read it.
    Ok(retired)
}
