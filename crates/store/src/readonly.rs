//! Opening a store read-only (`Options::read_only`): a shared lock, so any
//! number of readers open the store at once while writers wait, and the
//! recovery steps of a read-write open up to the replay (`recovery::load`),
//! which leaves a torn tail in place. Then nothing more: no new value-log
//! head or manifest, no `CURRENT` rewrite, no removal of unused files, no
//! flush, no background thread. The replayed records stay in the memtable,
//! so reads see every acknowledged write.

use std::path::Path;

use crate::db::DbInner;
use crate::dir_lock::Access;
use crate::error::{Error, Result};
use crate::manifest::Manifest;
use crate::options::Options;
use crate::recovery::{self, Loaded};

pub fn open(dir: &Path, opts: Options) -> Result<DbInner> {
    let Loaded {
        lock,
        keys,
        codec,
        vlog_codec,
        version,
        manifest,
        mem,
        replayed,
        ..
    } = recovery::load(dir, &opts, Access::ReadOnly)?;
    // `load` creates no store for a read-only open, so `CURRENT` named one.
    let manifest = manifest.ok_or_else(|| Error::NotFound {
        dir: dir.to_owned(),
    })?;
    let mut inner = DbInner::new(
        dir.to_owned(),
        opts,
        codec,
        vlog_codec,
        keys,
        version,
        None,
        Manifest::read_only(manifest),
        lock,
    );
    inner.set_read_only(replayed.end, mem);
    Ok(inner)
}
