//! The metadata cache ([`gvault_cas::CachedBackend`]) on an in-memory
//! repository, counting the requests that reach it (tests/s3.rs runs the
//! same scenario against the real S3 server).

mod cache_scenario;

use std::collections::BTreeMap;
use std::io;
use std::sync::{Arc, Mutex};

use gvault_cas::{Backend, Error, Kind, Result};

/// Objects in memory, as an object store holds them.
#[derive(Default)]
struct Mem {
    objects: Mutex<BTreeMap<String, Vec<u8>>>,
}

fn missing(key: &str) -> Error {
    Error::Io {
        context: format!("reading {key}"),
        source: io::Error::new(io::ErrorKind::NotFound, "no such object"),
    }
}

impl Mem {
    fn key(kind: Kind, name: &str) -> String {
        format!("{}/{name}", kind.dir())
    }
    fn read(&self, key: &str) -> Result<Vec<u8>> {
        self.objects
            .lock()
            .unwrap()
            .get(key)
            .cloned()
            .ok_or_else(|| missing(key))
    }
}

impl Backend for Mem {
    fn put(&self, kind: Kind, name: &str, data: &[u8]) -> Result<()> {
        self.put_root(&Mem::key(kind, name), data)
    }
    fn get(&self, kind: Kind, name: &str) -> Result<Vec<u8>> {
        self.read(&Mem::key(kind, name))
    }
    fn get_range(&self, kind: Kind, name: &str, offset: u64, len: usize) -> Result<Vec<u8>> {
        let b = self.get(kind, name)?;
        b.get(offset as usize..offset as usize + len)
            .map(<[u8]>::to_vec)
            .ok_or_else(|| missing(name))
    }
    fn size(&self, kind: Kind, name: &str) -> Result<u64> {
        Ok(self.get(kind, name)?.len() as u64)
    }
    fn list(&self, kind: Kind) -> Result<Vec<String>> {
        let dir = format!("{}/", kind.dir());
        Ok(self
            .objects
            .lock()
            .unwrap()
            .keys()
            .filter_map(|k| k.strip_prefix(&dir).map(str::to_string))
            .collect())
    }
    fn delete(&self, kind: Kind, name: &str) -> Result<()> {
        self.objects.lock().unwrap().remove(&Mem::key(kind, name));
        Ok(())
    }
    fn exists(&self, kind: Kind, name: &str) -> Result<bool> {
        Ok(self
            .objects
            .lock()
            .unwrap()
            .contains_key(&Mem::key(kind, name)))
    }
    fn put_root(&self, name: &str, data: &[u8]) -> Result<()> {
        self.objects
            .lock()
            .unwrap()
            .insert(name.to_string(), data.to_vec());
        Ok(())
    }
    fn get_root(&self, name: &str) -> Result<Vec<u8>> {
        self.read(name)
    }
}

#[test]
fn the_cache_saves_reads_and_is_never_trusted_over_the_repository() {
    let d = tempfile::tempdir().unwrap();
    cache_scenario::run(Arc::new(Mem::default()), "mem://repo", d.path());
}
