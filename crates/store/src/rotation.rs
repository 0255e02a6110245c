//! Online key rotation. `rotate_data_key` adds a data key that every new
//! file uses; the re-encryption pass then rewrites each live file still under
//! an older key (value-log head rolled over, older value-log files and
//! tables re-sealed in place, manifest rewritten) at a bounded byte rate, and
//! retires keys no file names any more. Every step replaces one file
//! atomically (a rename, or one manifest edit), so a crash leaves the store
//! consistent and the next pass resumes where this one stopped (files
//! already rewritten are under the current key).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use crate::codec::BlockCodec;
use crate::db::DbInner;
use crate::error::{Error, IoContext, Result};
use crate::format::{manifest_path, table_path, vlog_path, FileHeader, HEADER_LEN, POINTER_FILE};
use crate::keys::{keys_path, Encryption, KeyState};
use crate::reseal;

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
    /// Live files under no key (CRC32C only): the value log of an
    /// index-only store (`Encryption::seal_value_log`). Never stale.
    pub unsealed: Vec<String>,
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

/// Every live file (manifest and pointer file, value logs, tables, and
/// files waiting for deletion that readers may still open) with its data
/// key.
fn live_files(inner: &DbInner) -> Result<Vec<(String, u32)>> {
    let (v, pending_tables, pending_logs) = {
        let st = inner.lock_state();
        (
            st.current.clone(),
            st.obsolete_tables.clone(),
            st.obsolete_logs.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
        )
    };
    let manifest = inner.lock_manifest().number();
    // The pointer file too: it is written just after its manifest and may
    // be under a newer key than the manifest (a rotation in between), which
    // then is in use although no other file names it.
    let mut paths = vec![
        manifest_path(&inner.dir, manifest),
        inner.dir.join(POINTER_FILE),
    ];
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
        match header_key(inner, &p) {
            Ok(k) => out.push((name.unwrap_or_default(), k)),
            Err(_) if !inner.fs.exists(&p) => {} // deleted since the check
            Err(e) => return Err(e),
        }
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
    let mut unsealed = Vec::new();
    for (name, k) in live_files(inner)? {
        match k {
            0 => unsealed.push(name),
            k => keys.entry(k).or_default().push(name),
        }
    }
    Ok(KeyStatus {
        current,
        keys,
        retired,
        unsealed,
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
pub(crate) struct Throttle {
    start: Instant,
    bytes: u64,
    rate: u64,
}

impl Throttle {
    pub(crate) fn charge(&mut self, bytes: u64) {
        self.bytes += bytes;
        let due = Duration::from_secs_f64(self.bytes as f64 / self.rate as f64);
        if let Some(wait) = due.checked_sub(self.start.elapsed()) {
            std::thread::sleep(wait);
        }
    }
}

/// The re-encryption pass. Every file under an older key is re-sealed in
/// place (crate::reseal): same number, same layout, so no manifest edit,
/// value pointer or level changes, and each file is read and written once.
pub fn reencrypt(inner: &DbInner, rate: u64) -> Result<ReencryptReport> {
    let ks = key_state(inner)?;
    // One pass at a time; a second caller waits and then finds little or
    // nothing left to do.
    let _one_pass = inner.lock_reencrypt();
    // Pinned for the pass, like any writer's key: a rotation during the
    // pass makes it old while re-sealed files are still being written
    // under it.
    let pass_key = ks.codec.pin_key();
    let current = pass_key.id();
    let mut report = ReencryptReport::default();
    let mut throttle = Throttle {
        start: Instant::now(),
        bytes: 0,
        rate: rate.max(4096),
    };
    let stopping = || inner.is_shutting_down();
    // An index-only store's value log is under no key: steps 1 and 2 skip
    // it (and `retire_unused` never sees key 0, which is not in the
    // registry).
    let seal_value_log = ks.registry.lock().seal_value_log;

    // 1. The value-log head is still being appended to: start a new one, so
    //    that every older file is sealed (immutable, its size recorded).
    let head = {
        let mut guard = inner.lock_log();
        let log = guard
            .as_mut()
            .ok_or_else(|| Error::Closed("store is closed".into()))?;
        if seal_value_log
            && header_key(inner, &vlog_path(&inner.dir, log.file_number()))? != current
        {
            inner.rotate_log(log, false)?;
        }
        log.file_number()
    };

    // 2. Sealed value-log files. Each is synced and installed on a second
    //    thread while the next one is read and sealed.
    let logs: Vec<(u64, Option<(u64, u32)>)> = if seal_value_log {
        let v = inner.current();
        v.logs.values().map(|m| (m.number, m.sealed)).collect()
    } else {
        Vec::new()
    };
    let installed = std::thread::scope(|scope| -> Result<(u64, u64)> {
        let (tx, rx) = std::sync::mpsc::sync_channel::<(reseal::WrittenLog, u64)>(1);
        let finisher = scope.spawn(move || -> Result<(u64, u64)> {
            let (mut files, mut bytes) = (0, 0);
            for (w, size) in rx {
                if reseal::finish_log(inner, w)? {
                    files += 1;
                    bytes += size;
                }
            }
            Ok((files, bytes))
        });
        let mut sealing = Ok(());
        for (n, sealed) in logs {
            // Every file but the head is sealed; one that is not stays
            // under its key, which then is not retired.
            let (Some(sealed), false) = (sealed, n == head) else {
                continue;
            };
            if stopping() {
                break;
            }
            match reseal::reseal_log(inner, n, sealed, current, &mut throttle) {
                Ok(Some(w)) => {
                    if tx.send((w, sealed.0)).is_err() {
                        break; // the finisher failed; join reports why
                    }
                }
                Ok(None) => {}
                // Value-log GC may drop the file between the snapshot above
                // and its opening: it needs no re-sealing then.
                Err(_) if !inner.has_log(n) => {}
                Err(e) => {
                    sealing = Err(e);
                    break;
                }
            }
        }
        drop(tx);
        let finished = finisher.join().expect("finisher thread panicked");
        sealing.and(finished)
    })?;
    report.logs_rewritten += installed.0;
    report.bytes_read += installed.1;
    if stopping() {
        return Ok(report);
    }

    // 3. Tables, every level, one at a time under the compaction lock so
    //    that compactions interleave and none drops a table mid-rewrite.
    let levels = inner.current().levels.clone();
    for (level, files) in levels.iter().enumerate() {
        for f in files {
            if stopping() {
                return Ok(report);
            }
            let _guard = inner.lock_compaction();
            let still_live = inner.current().levels[level]
                .iter()
                .any(|g| g.number == f.number);
            if !still_live {
                continue;
            }
            if reseal::reseal_table(inner, f, current, &mut throttle)? {
                report.bytes_read += f.size;
                report.tables_rewritten += 1;
            }
        }
    }

    // Renames are durable before any key is retired.
    inner
        .fs
        .sync_dir(&inner.dir)
        .ctx(|| format!("syncing directory {}", inner.dir.display()))?;

    // 4. The manifest (and with it the pointer file).
    {
        let mut m = inner.lock_manifest();
        if header_key(inner, &manifest_path(&inner.dir, m.number()))? != current {
            let v = inner.current();
            inner.rewrite_manifest(&mut m, &v)?;
            report.manifests_rewritten += 1;
        }
    }

    inner.delete_obsolete_files();
    report.keys_retired = retire_unused(inner)?;
    Ok(report)
}

/// Drops from the registry every key but the current one that no live file
/// (nor one waiting for deletion, nor one being written) names.
///
/// The registry stays locked throughout, so no rotation runs meanwhile and
/// every file sealed under a key other than `current` had its key pinned
/// before this began. The pins are read before the live files: a file whose
/// pin is gone by then was already installed, and the walk finds it.
fn retire_unused(inner: &DbInner) -> Result<Vec<u32>> {
    let ks = key_state(inner)?;
    let mut r = ks.registry.lock();
    let current = r.current;
    let mut used: BTreeSet<u32> = ks.codec.pinned_keys().into_iter().collect();
    used.extend(live_files(inner)?.into_iter().map(|(_, k)| k));
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
