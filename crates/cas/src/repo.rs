//! A repository: its config, its keys, and the handle every command works
//! through. docs/repository.md §1–§3 give the bytes.
//!
//! Keys: the master key (key file, `GVAULT_KEY`, or a passphrase through
//! Argon2id) opens gvault-store's key registry `keys/KEYS`, which holds the
//! data key K. Every other key is derived from K with BLAKE3's key
//! derivation, each under its own context string, so that no two uses share
//! a key: the chunk-id key, the config MAC key, and one AES-256-GCM key per
//! object (pack, index file, snapshot), derived from K and the object's
//! random 256-bit id.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use gvault_accel::{Aes256Key, Blake3Key, ChunkParams};
use gvault_store::keys::Registry;
use gvault_store::{Encryption, MemFs, OsFs};
use zeroize::Zeroizing;

use crate::accel_jobs::{self, AccelBackend};
use crate::backend::{Backend, Kind, LocalDir};
use crate::backend_cache::CachedBackend;
use crate::coding::{put_u32, put_u8, Decoder};
use crate::error::{Error, Result};
use crate::index::Index;

pub const CONFIG_NAME: &str = "config";
pub const CONFIG_MAGIC: [u8; 8] = *b"GVCASCFG";
/// The format this build writes and the newest it reads.
pub const FORMAT_VERSION: u32 = 1;
const CONFIG_LEN: usize = 8 + 4 + 32 + 4 + 1 + 4 + 4 + 4 + 1 + 1 + 32;

/// How files are cut into chunks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Chunker {
    /// FastCDC 2020, normalized (level 1).
    Cdc { min: u32, avg: u32, max: u32 },
    /// Fixed-size blocks (seed 001's MosaStore mode); the last may be shorter.
    Fixed { size: u32 },
}

impl Chunker {
    pub const DEFAULT: Chunker = Chunker::Cdc {
        min: 512 * 1024,
        avg: 1024 * 1024,
        max: 8 * 1024 * 1024,
    };
    /// The largest chunk this chunker makes.
    pub fn max_len(&self) -> u32 {
        match *self {
            Chunker::Cdc { max, .. } => max,
            Chunker::Fixed { size } => size,
        }
    }
    pub fn validate(&self) -> Result<()> {
        match *self {
            Chunker::Cdc { min, avg, max } => accel_jobs::chunk_params(min, avg, max).map(|_| ()),
            Chunker::Fixed { size } if (4096..=64 << 20).contains(&size) => Ok(()),
            Chunker::Fixed { size } => Err(Error::InvalidArgument(format!(
                "fixed chunk size {size} is outside 4096..=67108864"
            ))),
        }
    }
    /// The FastCDC parameters (`None` in fixed-size mode).
    pub fn params(&self) -> Option<ChunkParams> {
        match *self {
            Chunker::Cdc { min, avg, max } => accel_jobs::chunk_params(min, avg, max).ok(),
            Chunker::Fixed { .. } => None,
        }
    }
}

/// The repository's settings, fixed at `init`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    pub version: u32,
    pub repo_id: [u8; 32],
    /// The registry key id of the data key K.
    pub key_id: u32,
    pub chunker: Chunker,
    /// Whether chunks are zstd-compressed where that pays.
    pub compression: bool,
}

impl Config {
    fn encode_body(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(CONFIG_LEN);
        b.extend_from_slice(&CONFIG_MAGIC);
        put_u32(&mut b, self.version);
        b.extend_from_slice(&self.repo_id);
        put_u32(&mut b, self.key_id);
        let (kind, a, v, m) = match self.chunker {
            Chunker::Cdc { min, avg, max } => (0u8, min, avg, max),
            Chunker::Fixed { size } => (1u8, size, size, size),
        };
        put_u8(&mut b, kind);
        put_u32(&mut b, a);
        put_u32(&mut b, v);
        put_u32(&mut b, m);
        put_u8(&mut b, 1); // normalization level
        put_u8(&mut b, self.compression as u8);
        b
    }

    /// Parses the cleartext config; the MAC is checked by the caller once
    /// the key is known. A newer version is refused before anything else.
    fn decode(bytes: &[u8], path: &Path) -> Result<(Config, [u8; 32])> {
        let bad = |why: &str| Error::NotARepository {
            path: path.to_owned(),
            reason: format!("config: {why}"),
        };
        if bytes.len() < 12 || bytes[..8] != CONFIG_MAGIC {
            return Err(bad("bad magic"));
        }
        let mut d = Decoder::new(&bytes[8..]);
        let version = d.u32().ok_or_else(|| bad("cut short"))?;
        if version > FORMAT_VERSION {
            return Err(Error::NewerFormat {
                path: path.to_owned(),
                found: version,
                supported: FORMAT_VERSION,
            });
        }
        if version == 0 || bytes.len() != CONFIG_LEN {
            return Err(bad("malformed (wrong version or length)"));
        }
        let repo_id = d.array().ok_or_else(|| bad("cut short"))?;
        let key_id = d.u32().ok_or_else(|| bad("cut short"))?;
        let kind = d.u8().ok_or_else(|| bad("cut short"))?;
        let a = d.u32().ok_or_else(|| bad("cut short"))?;
        let v = d.u32().ok_or_else(|| bad("cut short"))?;
        let m = d.u32().ok_or_else(|| bad("cut short"))?;
        let _level = d.u8().ok_or_else(|| bad("cut short"))?;
        let compression = d.u8().ok_or_else(|| bad("cut short"))? != 0;
        let mac = d.array().ok_or_else(|| bad("cut short"))?;
        let chunker = match kind {
            0 => Chunker::Cdc {
                min: a,
                avg: v,
                max: m,
            },
            1 => Chunker::Fixed { size: a },
            k => return Err(bad(&format!("unknown chunker {k}"))),
        };
        // Only what `init` accepts: a backup cuts with it (a fixed size of 0
        // panics, a 4 GiB maximum allocates windows of 16 GiB).
        chunker
            .validate()
            .map_err(|e| bad(&format!("chunker {chunker:?}: {e}")))?;
        Ok((
            Config {
                version,
                repo_id,
                key_id,
                chunker,
                compression,
            },
            mac,
        ))
    }
}

/// The keys of an open repository.
pub struct Keys {
    data: Zeroizing<[u8; 32]>,
    pub chunk_id: Blake3Key,
}

/// The object kinds with their own derived keys.
#[derive(Clone, Copy, Debug)]
pub enum ObjectKind {
    Pack,
    Index,
    Snapshot,
}

impl Keys {
    pub(crate) fn new(data: &Aes256Key) -> Keys {
        let data = Zeroizing::new(*data.expose());
        let chunk_id =
            accel_jobs::blake3_key(blake3::derive_key("gvault-cas v1 chunk id key", &data[..]));
        Keys { data, chunk_id }
    }
    pub(crate) fn config_mac(&self, body: &[u8]) -> [u8; 32] {
        let k = Zeroizing::new(blake3::derive_key(
            "gvault-cas v1 config mac key",
            &self.data[..],
        ));
        *blake3::keyed_hash(&k, body).as_bytes()
    }
    /// The AES-256-GCM key of one object: derived from K and the object's
    /// random id, so that every object has its own key (docs §2).
    pub fn object_key(&self, kind: ObjectKind, id: &[u8; 32]) -> Aes256Key {
        let ctx = match kind {
            ObjectKind::Pack => "gvault-cas v1 pack key",
            ObjectKind::Index => "gvault-cas v1 index key",
            ObjectKind::Snapshot => "gvault-cas v1 snapshot key",
        };
        let mut input = Zeroizing::new([0u8; 64]);
        input[..32].copy_from_slice(&self.data[..]);
        input[32..].copy_from_slice(id);
        accel_jobs::aes_key(blake3::derive_key(ctx, &input[..]))
    }
}

/// An open repository.
pub struct Repository {
    pub root: PathBuf,
    pub backend: Arc<dyn Backend>,
    pub accel: AccelBackend,
    pub config: Config,
    pub keys: Keys,
    pub index: Index,
}

/// Options for `init`.
#[derive(Clone, Copy, Debug)]
pub struct InitOptions {
    pub chunker: Chunker,
    pub compression: bool,
}

impl Default for InitOptions {
    fn default() -> Self {
        InitOptions {
            chunker: Chunker::DEFAULT,
            compression: true,
        }
    }
}

fn keys_dir(root: &Path) -> PathBuf {
    root.join("keys")
}

/// A random 256-bit object id.
pub fn new_id() -> [u8; 32] {
    gvault_store::keys::random_bytes()
}

pub fn parse_id(name: &str) -> Option<[u8; 32]> {
    let mut id = [0u8; 32];
    hex::decode_to_slice(name, &mut id).ok()?;
    Some(id)
}

impl Repository {
    /// Creates a repository in `root` (which must be absent or empty).
    pub fn init(
        root: &Path,
        enc: &Encryption,
        opts: InitOptions,
        accel: AccelBackend,
    ) -> Result<Repository> {
        opts.chunker.validate()?;
        if root.join(CONFIG_NAME).exists() {
            return Err(Error::InvalidArgument(format!(
                "{} already holds a repository",
                root.display()
            )));
        }
        if let Ok(mut rd) = std::fs::read_dir(root) {
            if rd.next().is_some() {
                return Err(Error::InvalidArgument(format!(
                    "{} is not empty; a repository needs an empty or new directory",
                    root.display()
                )));
            }
        }
        let local = LocalDir::new(root);
        local.create_dirs()?;
        let kd = keys_dir(root);
        std::fs::create_dir_all(&kd).map_err(|e| Error::Io {
            context: format!("creating {}", kd.display()),
            source: e,
        })?;
        let registry = Registry::new(enc, &gvault_store::keys::keys_path(&kd))?;
        registry.save(&OsFs, &kd, &*accel)?;
        Repository::write_config(&registry, &opts, root.to_owned(), Arc::new(local), accel)
    }

    /// The last step of an init, on any backend: the config, under the
    /// registry's current key, written last, so that a directory or prefix
    /// without it is no repository and an interrupted init leaves nothing
    /// half made.
    fn write_config(
        registry: &Registry,
        opts: &InitOptions,
        root: PathBuf,
        backend: Arc<dyn Backend>,
        accel: AccelBackend,
    ) -> Result<Repository> {
        let key_id = registry.current;
        let data = registry
            .keys
            .get(&key_id)
            .ok_or_else(|| Error::InvalidArgument("key registry has no current key".into()))?;
        let keys = Keys::new(data);
        let config = Config {
            version: FORMAT_VERSION,
            repo_id: registry.store_id_256(),
            key_id,
            chunker: opts.chunker,
            compression: opts.compression,
        };
        let mut bytes = config.encode_body();
        let mac = keys.config_mac(&bytes);
        bytes.extend_from_slice(&mac);
        backend.put_root(CONFIG_NAME, &bytes)?;
        Ok(Repository {
            root,
            backend,
            accel,
            config,
            keys,
            index: Index::empty(),
        })
    }

    /// Opens the repository in `root`: the config's version first (a newer
    /// format is refused before any key is tried), then the key registry,
    /// then the config's MAC, then the index files' footers.
    pub fn open(root: &Path, enc: Option<&Encryption>, accel: AccelBackend) -> Result<Repository> {
        let cfg_path = root.join(CONFIG_NAME);
        if !cfg_path.exists() {
            return Err(Error::NotARepository {
                path: root.to_owned(),
                reason: "no config file (create one with `gvault repo init`)".into(),
            });
        }
        let local = LocalDir::new(root);
        let bytes = local.get_root(CONFIG_NAME)?;
        let (config, mac) = Config::decode(&bytes, &cfg_path)?;
        let enc = enc.ok_or_else(|| Error::KeyRequired {
            dir: root.to_owned(),
        })?;
        let kd = keys_dir(root);
        let registry = Registry::load(&OsFs, &kd, enc, &*accel)?;
        let keys = verified_keys(&registry, &config, &bytes, &mac, "file")?;
        Repository::with_index(root.to_owned(), Arc::new(local), accel, config, keys)
    }

    /// The opened repository with its index files' footers loaded.
    fn with_index(
        root: PathBuf,
        backend: Arc<dyn Backend>,
        accel: AccelBackend,
        config: Config,
        keys: Keys,
    ) -> Result<Repository> {
        let mut repo = Repository {
            root,
            backend,
            accel,
            config,
            keys,
            index: Index::empty(),
        };
        repo.index = Index::load(&repo)?;
        Ok(repo)
    }

    /// Creates a repository on any backend (S3, …): as [`Repository::init`],
    /// with the key registry stored as the object `keys/KEYS` beside
    /// `config`. `location` names it in messages (`s3://bucket/prefix`).
    /// The backend's namespace must hold no repository objects yet.
    pub fn init_on(
        backend: Arc<dyn Backend>,
        location: &str,
        enc: &Encryption,
        opts: InitOptions,
        accel: AccelBackend,
    ) -> Result<Repository> {
        opts.chunker.validate()?;
        let root = PathBuf::from(location);
        match backend.get_root(CONFIG_NAME) {
            Ok(_) => {
                return Err(Error::InvalidArgument(format!(
                    "{location} already holds a repository"
                )))
            }
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(e),
        }
        for k in Kind::ALL {
            if !backend.list(k)?.is_empty() {
                return Err(Error::InvalidArgument(format!(
                    "{location} is not empty (it has {}/ objects); a repository needs an empty prefix",
                    k.dir()
                )));
            }
        }
        let kpath = keys_object_path();
        let registry = Registry::new(enc, &kpath)?;
        let fs = MemFs::default();
        registry.save(&fs, Path::new(KEYS_DIR), &*accel)?;
        let sealed = fs
            .take(&kpath)
            .ok_or_else(|| Error::InvalidArgument("the key registry wrote no keys file".into()))?;
        backend.put_root(KEYS_OBJECT, &sealed)?;
        Repository::write_config(&registry, &opts, root, backend, accel)
    }

    /// Opens a repository on any backend, in the order of
    /// [`Repository::open`]: config version, key registry, config MAC,
    /// index footers.
    pub fn open_on(
        backend: Arc<dyn Backend>,
        location: &str,
        enc: Option<&Encryption>,
        accel: AccelBackend,
    ) -> Result<Repository> {
        Self::open_on_cached(backend, location, enc, accel, None)
    }

    /// [`Repository::open_on`] with a local cache of the index files and
    /// snapshots in `<cache_root>/<repository id>/` (a [`CachedBackend`]);
    /// `None`: no cache. The cache is chosen only once the config's MAC
    /// verified, so that a forged config cannot point at another
    /// repository's cache.
    pub fn open_on_cached(
        backend: Arc<dyn Backend>,
        location: &str,
        enc: Option<&Encryption>,
        accel: AccelBackend,
        cache_root: Option<&Path>,
    ) -> Result<Repository> {
        let root = PathBuf::from(location);
        let bytes = match backend.get_root(CONFIG_NAME) {
            Ok(b) => b,
            Err(e) if is_not_found(&e) => {
                return Err(Error::NotARepository {
                    path: root,
                    reason: "no config object (create one with `gvault repo init`)".into(),
                })
            }
            Err(e) => return Err(e),
        };
        let (config, mac) = Config::decode(&bytes, &root.join(CONFIG_NAME))?;
        let enc = enc.ok_or_else(|| Error::KeyRequired { dir: root.clone() })?;
        let kpath = keys_object_path();
        let sealed = backend.get_root(KEYS_OBJECT)?;
        let fs = MemFs::default();
        fs.insert(&kpath, sealed);
        let registry = Registry::load(&fs, Path::new(KEYS_DIR), enc, &*accel)?;
        let keys = verified_keys(&registry, &config, &bytes, &mac, "object")?;
        let backend: Arc<dyn Backend> = match cache_root {
            Some(c) => Arc::new(CachedBackend::new(
                backend,
                c.join(hex::encode(config.repo_id)),
            )?),
            None => backend,
        };
        Repository::with_index(root, backend, accel, config, keys)
    }

    pub fn accel(&self) -> &dyn gvault_accel::Backend {
        &*self.accel
    }
}

/// The keys of the data key the config names, once the config's MAC (over
/// `bytes`, the config as stored) verifies under them; `what` is "file" or
/// "object" in the message.
fn verified_keys(
    registry: &Registry,
    config: &Config,
    bytes: &[u8],
    mac: &[u8; 32],
    what: &str,
) -> Result<Keys> {
    let data = registry.keys.get(&config.key_id).ok_or_else(|| {
        Error::corrupt(
            "config",
            format!("names data key {} which keys/KEYS lacks", config.key_id),
        )
    })?;
    let keys = Keys::new(data);
    if keys.config_mac(&bytes[..CONFIG_LEN - 32]) != *mac {
        return Err(Error::corrupt(
            "config",
            format!("its MAC does not verify (the {what} was altered)"),
        ));
    }
    Ok(keys)
}

/// The key registry of a repository on a backend: the object `keys/KEYS`.
pub const KEYS_OBJECT: &str = "keys/KEYS";
const KEYS_DIR: &str = "keys";

fn keys_object_path() -> PathBuf {
    gvault_store::keys::keys_path(Path::new(KEYS_DIR))
}

/// Whether an error says the object does not exist.
pub fn is_not_found(e: &Error) -> bool {
    matches!(e, Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
}

/// The 256-bit repository id from the registry's store id.
trait StoreId256 {
    fn store_id_256(&self) -> [u8; 32];
}

impl StoreId256 for Registry {
    fn store_id_256(&self) -> [u8; 32] {
        blake3::derive_key("gvault-cas v1 repository id", &self.store_id)
    }
}
