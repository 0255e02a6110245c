//! Master key sources and the key registry.
//!
//! The master key (from a key file, the environment or a passphrase through
//! Argon2id) never seals data: it wraps the data keys, which live in the
//! registry file `KEYS`, itself sealed with AES-256-GCM under the master key.
//! Rotating the master key rewrites only `KEYS`; rotating the data key adds
//! one to it. docs/format.md gives the layout.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use gvault_accel::{Aes256Key, Backend, CpuBackend, Nonce96, Tag};
use rand::RngCore;
use zeroize::Zeroizing;

use crate::codec::{BlockCodec, Crc32cCodec};
use crate::coding::{put_u32, Decoder};
use crate::crypto::{GcmCodec, SealObserver, STORE_ID_LEN, TAG_LEN};
use crate::env::FileSystem;
use crate::error::{Error, IoContext, Result};

pub const KEYS_FILE: &str = "KEYS";
pub const KEYS_TEMP: &str = "KEYS.tmp";
pub(crate) const MAGIC: [u8; 4] = *b"GVKR";
/// Version 2 appends a flags word to the sealed body; version 1 (no flags:
/// everything sealed) is still read.
const VERSION: u16 = 2;
/// Registry flag: value-log files keep CRC32C (index-only encryption).
const FLAG_VALUE_LOG_UNSEALED: u32 = 1;
pub(crate) const HEADER_LEN: usize = 48;
const KEY_LEN: usize = 32;
const SALT_LEN: usize = 16;

/// Argon2id cost parameters; stored in `KEYS`, so opening uses the ones the
/// store was created (or last re-keyed) with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KdfParams {
    pub m_cost_kib: u32,
    pub t_cost: u32,
    pub p_cost: u32,
}

impl Default for KdfParams {
    /// OWASP's first Argon2id recommendation: 46 MiB, 1 pass... rounded up
    /// to 64 MiB and 3 passes, about a quarter second on a desktop core.
    fn default() -> Self {
        KdfParams {
            m_cost_kib: 64 * 1024,
            t_cost: 3,
            p_cost: 1,
        }
    }
}

impl KdfParams {
    /// The most memory, passes and lanes gvault writes or reads: a damaged
    /// or forged header must not make an open reserve terabytes or run for
    /// days before the key is found wrong.
    pub const MAX_M_COST_KIB: u32 = 4 << 20;
    pub const MAX_T_COST: u32 = 64;
    pub const MAX_P_COST: u32 = 64;

    /// Why these costs are out of bounds, if they are.
    pub fn check(&self) -> std::result::Result<(), String> {
        if self.m_cost_kib > Self::MAX_M_COST_KIB
            || self.t_cost > Self::MAX_T_COST
            || self.p_cost > Self::MAX_P_COST
        {
            return Err(format!(
                "Argon2id costs of {} KiB, {} passes, {} lanes exceed gvault's bounds ({} KiB, {} passes, {} lanes)",
                self.m_cost_kib,
                self.t_cost,
                self.p_cost,
                Self::MAX_M_COST_KIB,
                Self::MAX_T_COST,
                Self::MAX_P_COST
            ));
        }
        Ok(())
    }
}

/// Where the master key comes from.
#[derive(Clone)]
pub enum MasterKeySource {
    /// 32 raw bytes (a key file or the `GVAULT_KEY` variable).
    Key(Aes256Key),
    /// A passphrase, stretched with Argon2id.
    Passphrase(Arc<Zeroizing<String>>),
}

impl fmt::Debug for MasterKeySource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MasterKeySource::Key(_) => f.write_str("Key(redacted)"),
            MasterKeySource::Passphrase(_) => f.write_str("Passphrase(redacted)"),
        }
    }
}

/// Encryption at rest: set in [`crate::Options`] to create an encrypted store
/// or to open one.
#[derive(Clone, Debug)]
pub struct Encryption {
    pub master: MasterKeySource,
    /// Argon2id costs for a registry written with a passphrase (creation,
    /// `rotate-master`); opening uses the stored ones.
    pub kdf: KdfParams,
    /// Whether value-log files are sealed too. `Some(false)` creates an
    /// *index-only* store (seed 000's "index encryption"): tables, manifest
    /// and pointer file are sealed, the value log keeps CRC32C, so every
    /// value, and every key and small value until its memtable is flushed,
    /// lies on disk in the clear, and value-log bytes are protected against
    /// accidents only, not against deliberate changes. It exists to measure
    /// what sealing the value log costs; it is fixed at creation and kept
    /// in the sealed registry, so it cannot be switched by editing files.
    /// `None`: a new store seals everything; an existing one keeps what it
    /// was created with. `Some(x)` on an existing store created otherwise
    /// is refused before any data file is read.
    pub seal_value_log: Option<bool>,
}

impl Encryption {
    pub fn with_key(key: Aes256Key) -> Self {
        Encryption {
            master: MasterKeySource::Key(key),
            kdf: KdfParams::default(),
            seal_value_log: None,
        }
    }

    pub fn with_passphrase(passphrase: impl Into<String>) -> Self {
        Encryption {
            master: MasterKeySource::Passphrase(Arc::new(Zeroizing::new(passphrase.into()))),
            kdf: KdfParams::default(),
            seal_value_log: None,
        }
    }
}

/// Random bytes from the operating system.
pub fn random_bytes<const N: usize>() -> [u8; N] {
    let mut b = [0u8; N];
    rand::rngs::OsRng.fill_bytes(&mut b);
    b
}

/// A fresh random 256-bit key.
pub fn generate_key() -> Aes256Key {
    let mut b = Zeroizing::new([0u8; KEY_LEN]);
    rand::rngs::OsRng.fill_bytes(&mut *b);
    Aes256Key::from_bytes(*b)
}

/// Parses 64 hexadecimal digits (surrounding whitespace ignored).
pub fn parse_hex_key(text: &str) -> Result<Aes256Key> {
    let t = text.trim();
    let mut b = Zeroizing::new([0u8; KEY_LEN]);
    hex::decode_to_slice(t, &mut *b).map_err(|_| {
        Error::InvalidArgument(format!(
            "a master key is 64 hexadecimal digits (32 bytes); got {} characters",
            t.len()
        ))
    })?;
    Ok(Aes256Key::from_bytes(*b))
}

/// Creates a key file holding a new random key as hex, readable by its owner
/// only (mode 0600); refuses to overwrite an existing file.
pub fn create_key_file(path: &Path) -> Result<Aes256Key> {
    use std::io::Write;
    let key = generate_key();
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o600);
    let mut f = o
        .open(path)
        .ctx(|| format!("creating key file {}", path.display()))?;
    let text = Zeroizing::new(format!("{}\n", hex::encode(key.expose())));
    f.write_all(text.as_bytes())
        .and_then(|_| f.sync_all())
        .ctx(|| format!("writing key file {}", path.display()))?;
    Ok(key)
}

/// Reads a key file; refuses one that others may read, as ssh does.
pub fn read_key_file(path: &Path) -> Result<Aes256Key> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let meta =
            std::fs::metadata(path).ctx(|| format!("reading key file {}", path.display()))?;
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(Error::InvalidArgument(format!(
                "key file {} has mode {mode:o}; it must be readable by its owner only (chmod 600)",
                path.display()
            )));
        }
    }
    let text = Zeroizing::new(
        std::fs::read_to_string(path).ctx(|| format!("reading key file {}", path.display()))?,
    );
    parse_hex_key(&text).map_err(|e| match e {
        Error::InvalidArgument(r) => {
            Error::InvalidArgument(format!("key file {}: {r}", path.display()))
        }
        e => e,
    })
}

/// How the master key was derived: the registry's cleartext header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct KdfHeader {
    /// 0: raw key; 1: Argon2id over a passphrase.
    kind: u8,
    params: KdfParams,
    salt: [u8; SALT_LEN],
}

fn derive_master(source: &MasterKeySource, kdf: &KdfHeader, path: &Path) -> Result<Aes256Key> {
    match (source, kdf.kind) {
        (MasterKeySource::Key(k), 0) => Ok(k.clone()),
        (MasterKeySource::Passphrase(p), 1) => {
            let params = argon2::Params::new(
                kdf.params.m_cost_kib,
                kdf.params.t_cost,
                kdf.params.p_cost,
                Some(KEY_LEN),
            )
            .map_err(|e| {
                Error::corruption(path, "key-derivation parameters", format!("invalid: {e}"))
            })?;
            let argon =
                argon2::Argon2::new(argon2::Algorithm::Argon2id, argon2::Version::V0x13, params);
            let mut out = Zeroizing::new([0u8; KEY_LEN]);
            argon
                .hash_password_into(p.as_bytes(), &kdf.salt, &mut *out)
                .map_err(|e| Error::InvalidArgument(format!("deriving the master key: {e}")))?;
            Ok(Aes256Key::from_bytes(*out))
        }
        (MasterKeySource::Key(_), _) => Err(Error::WrongKey {
            path: path.to_owned(),
            reason: "its master key comes from a passphrase, and a raw key was given".into(),
        }),
        (MasterKeySource::Passphrase(_), _) => Err(Error::WrongKey {
            path: path.to_owned(),
            reason:
                "its master key is a raw key (key file or GVAULT_KEY), and a passphrase was given"
                    .into(),
        }),
    }
}

fn kdf_for(enc: &Encryption) -> KdfHeader {
    match enc.master {
        MasterKeySource::Key(_) => KdfHeader {
            kind: 0,
            params: KdfParams {
                m_cost_kib: 0,
                t_cost: 0,
                p_cost: 0,
            },
            salt: [0; SALT_LEN],
        },
        MasterKeySource::Passphrase(_) => KdfHeader {
            kind: 1,
            params: enc.kdf,
            salt: random_bytes(),
        },
    }
}

/// The decrypted registry: the store id and every data key still in use.
pub struct Registry {
    pub store_id: [u8; STORE_ID_LEN],
    /// The key new files are sealed under.
    pub current: u32,
    /// Ids are never reused, so a retired key's id never names another key.
    pub next_id: u32,
    pub keys: BTreeMap<u32, Aes256Key>,
    /// Whether value-log files are sealed (false: index-only store).
    pub seal_value_log: bool,
    kdf: KdfHeader,
    master: Aes256Key,
}

impl Registry {
    /// A new registry with one data key (id 1).
    pub fn new(enc: &Encryption, path: &Path) -> Result<Registry> {
        let kdf = kdf_for(enc);
        kdf.params.check().map_err(Error::InvalidArgument)?;
        let master = derive_master(&enc.master, &kdf, path)?;
        Ok(Registry {
            store_id: random_bytes(),
            current: 1,
            next_id: 2,
            keys: BTreeMap::from([(1, generate_key())]),
            seal_value_log: enc.seal_value_log.unwrap_or(true),
            kdf,
            master,
        })
    }

    /// Reads and opens `KEYS`. Fails, before any data file is read, if the
    /// master key is wrong or the file was altered or cut short.
    pub fn load(
        fs: &dyn FileSystem,
        dir: &Path,
        enc: &Encryption,
        backend: &dyn Backend,
    ) -> Result<Registry> {
        let path = dir.join(KEYS_FILE);
        let bytes = Zeroizing::new(
            fs.read_all(&path)
                .ctx(|| format!("reading key registry {}", path.display()))?,
        );
        if bytes.len() < HEADER_LEN + TAG_LEN {
            return Err(Error::corruption(
                &path,
                "whole file",
                format!(
                    "key registry is {} bytes, shorter than its header and tag (truncated)",
                    bytes.len()
                ),
            ));
        }
        let (head, rest) = bytes.split_at(HEADER_LEN);
        if head[..4] != MAGIC {
            return Err(Error::corruption(
                &path,
                "header",
                "not a gvault key registry (bad magic)",
            ));
        }
        let mut d = Decoder::new(&head[4..]);
        let version = d.u16().unwrap_or(0);
        if !(1..=VERSION).contains(&version) {
            return Err(Error::Unsupported {
                path,
                reason: format!("key registry version {version} (this build reads {VERSION})"),
            });
        }
        let kind = d.u8().unwrap_or(0xff);
        let _reserved = d.u8();
        let params = KdfParams {
            m_cost_kib: d.u32().unwrap_or(0),
            t_cost: d.u32().unwrap_or(0),
            p_cost: d.u32().unwrap_or(0),
        };
        let mut salt = [0u8; SALT_LEN];
        salt.copy_from_slice(&head[20..20 + SALT_LEN]);
        let nonce = Nonce96::try_from_slice(&head[36..HEADER_LEN]).expect("12 bytes");
        if kind > 1 {
            return Err(Error::corruption(
                &path,
                "header",
                format!("unknown key-derivation kind {kind}"),
            ));
        }
        if kind == 1 {
            params
                .check()
                .map_err(|why| Error::corruption(&path, "key-derivation parameters", why))?;
        }
        let kdf = KdfHeader { kind, params, salt };
        let master = derive_master(&enc.master, &kdf, &path)?;
        let (body, tag) = rest.split_at(rest.len() - TAG_LEN);
        let mut body = Zeroizing::new(body.to_vec());
        let tag = Tag::try_from_slice(tag).expect("16 bytes");
        match backend.open_block(&master, nonce, head, tag, body.as_mut_slice()) {
            Ok(()) => {}
            Err(e) if e.is_authentication_failure() => {
                return Err(Error::WrongKey {
                    path,
                    reason: "the master key does not open it (wrong key or passphrase, or the file was altered)".into(),
                })
            }
            Err(e) => {
                return Err(Error::InvalidArgument(format!(
                    "opening the key registry: {e}"
                )))
            }
        }
        let bad = |why: &str| Error::corruption(&path, "sealed body", why.to_string());
        let mut d = Decoder::new(&body);
        let mut store_id = [0u8; STORE_ID_LEN];
        store_id.copy_from_slice(
            d.take(STORE_ID_LEN)
                .ok_or_else(|| bad("store id cut short"))?,
        );
        let current = d.u32().ok_or_else(|| bad("current key id missing"))?;
        let next_id = d.u32().ok_or_else(|| bad("next key id missing"))?;
        let n = d.u32().ok_or_else(|| bad("key count missing"))?;
        let mut keys = BTreeMap::new();
        for _ in 0..n {
            let id = d.u32().ok_or_else(|| bad("key entry cut short"))?;
            let k = d.take(KEY_LEN).ok_or_else(|| bad("key entry cut short"))?;
            let key = Aes256Key::try_from_slice(k).map_err(|_| bad("key entry cut short"))?;
            if id == 0 || id >= next_id || keys.insert(id, key).is_some() {
                return Err(bad("malformed key id"));
            }
        }
        let flags = if version >= 2 {
            d.u32().ok_or_else(|| bad("flags missing"))?
        } else {
            0
        };
        if !d.is_empty() || !keys.contains_key(&current) {
            return Err(bad(
                "malformed registry (current key missing or trailing bytes)",
            ));
        }
        if flags & !FLAG_VALUE_LOG_UNSEALED != 0 {
            return Err(Error::Unsupported {
                path,
                reason: format!(
                    "key registry flags {flags:#x} (this build knows {FLAG_VALUE_LOG_UNSEALED:#x})"
                ),
            });
        }
        Ok(Registry {
            store_id,
            current,
            next_id,
            keys,
            seal_value_log: flags & FLAG_VALUE_LOG_UNSEALED == 0,
            kdf,
            master,
        })
    }

    /// Seals and writes `KEYS` atomically (temporary file, fsync, rename,
    /// fsync of the directory) under a fresh random nonce.
    pub fn save(&self, fs: &dyn FileSystem, dir: &Path, backend: &dyn Backend) -> Result<()> {
        self.save_as(fs, dir, backend, VERSION)
    }

    /// `save` in registry format `version` (tests write version 1, which
    /// has no flags word, to check it is still read).
    fn save_as(
        &self,
        fs: &dyn FileSystem,
        dir: &Path,
        backend: &dyn Backend,
        version: u16,
    ) -> Result<()> {
        let nonce = Nonce96::from_bytes(random_bytes());
        let mut head = Vec::with_capacity(HEADER_LEN);
        head.extend_from_slice(&MAGIC);
        head.extend_from_slice(&version.to_le_bytes());
        head.push(self.kdf.kind);
        head.push(0);
        put_u32(&mut head, self.kdf.params.m_cost_kib);
        put_u32(&mut head, self.kdf.params.t_cost);
        put_u32(&mut head, self.kdf.params.p_cost);
        head.extend_from_slice(&self.kdf.salt);
        head.extend_from_slice(nonce.as_bytes());
        debug_assert_eq!(head.len(), HEADER_LEN);
        let mut body = Zeroizing::new(Vec::with_capacity(32 + self.keys.len() * 36));
        body.extend_from_slice(&self.store_id);
        put_u32(&mut body, self.current);
        put_u32(&mut body, self.next_id);
        put_u32(&mut body, self.keys.len() as u32);
        for (id, k) in &self.keys {
            put_u32(&mut body, *id);
            body.extend_from_slice(k.expose());
        }
        let flags = if self.seal_value_log {
            0
        } else {
            FLAG_VALUE_LOG_UNSEALED
        };
        if version >= 2 {
            put_u32(&mut body, flags);
        }
        let tag = backend
            .seal_block(&self.master, nonce, &head, body.as_mut_slice())
            .map_err(|e| Error::InvalidArgument(format!("sealing the key registry: {e}")))?;
        let mut bytes = head;
        bytes.extend_from_slice(&body);
        bytes.extend_from_slice(tag.as_bytes());
        let tmp = dir.join(KEYS_TEMP);
        let mut f = fs
            .create(&tmp)
            .ctx(|| format!("creating {}", tmp.display()))?;
        f.append(&bytes)
            .and_then(|_| f.sync())
            .ctx(|| format!("writing {}", tmp.display()))?;
        drop(f);
        let path = dir.join(KEYS_FILE);
        fs.rename(&tmp, &path)
            .ctx(|| format!("renaming {} to {}", tmp.display(), path.display()))?;
        fs.sync_dir(dir)
            .ctx(|| format!("syncing directory {}", dir.display()))
    }

    /// Adds a fresh data key and makes it the one new files use.
    pub fn add_key(&mut self) -> u32 {
        let id = self.next_id;
        self.next_id += 1;
        self.keys.insert(id, generate_key());
        self.current = id;
        id
    }

    /// Re-derives the master key from a new source (a new salt for a
    /// passphrase); the data keys are unchanged.
    pub fn rewrap(&mut self, enc: &Encryption, path: &Path) -> Result<()> {
        let kdf = kdf_for(enc);
        kdf.params.check().map_err(Error::InvalidArgument)?;
        self.master = derive_master(&enc.master, &kdf, path)?;
        self.kdf = kdf;
        Ok(())
    }

    pub fn codec(&self, backend: Arc<dyn Backend>, observer: Option<SealObserver>) -> GcmCodec {
        GcmCodec::new(
            self.store_id,
            self.current,
            self.key_list(),
            backend,
            observer,
        )
    }

    pub fn key_list(&self) -> Vec<(u32, Aes256Key)> {
        self.keys.iter().map(|(i, k)| (*i, k.clone())).collect()
    }
}

pub fn keys_path(dir: &Path) -> PathBuf {
    dir.join(KEYS_FILE)
}

/// An open store's keys: the registry (for rotation) and the codec built
/// from it, which every reader and writer shares.
pub struct KeyState {
    pub registry: parking_lot::Mutex<Registry>,
    pub codec: Arc<GcmCodec>,
    /// What value-log files are written and read with: `codec`, or CRC32C
    /// in an index-only store. Fixed for the store's life (the registry's
    /// flag), so a file under key 0 opens only where this is CRC32C, and
    /// only as a value-log file: tables and manifests never accept it.
    pub vlog_codec: Arc<dyn BlockCodec>,
    pub backend: Arc<dyn Backend>,
}

impl KeyState {
    fn new(registry: Registry, opts: &crate::Options) -> KeyState {
        let backend = opts
            .crypto_backend
            .clone()
            .unwrap_or_else(|| CpuBackend::shared() as Arc<dyn Backend>);
        let codec = Arc::new(registry.codec(backend.clone(), opts.seal_observer.clone()));
        let vlog_codec: Arc<dyn BlockCodec> = if registry.seal_value_log {
            codec.clone()
        } else {
            Arc::new(Crc32cCodec)
        };
        KeyState {
            registry: parking_lot::Mutex::new(registry),
            codec,
            vlog_codec,
            backend,
        }
    }

    /// Opens the key registry of an existing store, if it has one. Runs
    /// before any other file is read, so a missing or wrong key stops the
    /// open with nothing touched.
    pub fn load(opts: &crate::Options, dir: &Path) -> Result<Option<KeyState>> {
        let fs = &*opts.fs;
        if !fs.exists(&keys_path(dir)) {
            // Recovery refuses a key for an unencrypted store once the
            // pointer file has shown that this is a store at all.
            return Ok(None);
        }
        let enc = opts.encryption.as_ref().ok_or_else(|| Error::KeyRequired {
            dir: dir.to_owned(),
        })?;
        let backend = opts
            .crypto_backend
            .clone()
            .unwrap_or_else(|| CpuBackend::shared() as Arc<dyn Backend>);
        let registry = Registry::load(fs, dir, enc, &*backend)?;
        if let Some(want) = enc.seal_value_log {
            if want != registry.seal_value_log {
                let on_off = |b: bool| if b { "on" } else { "off (index-only)" };
                return Err(Error::InvalidArgument(format!(
                    "store {} was created with value-log sealing {}, and the options ask for it {}; \
                     it is fixed at creation (leave the option unset to open the store as it is)",
                    dir.display(),
                    on_off(registry.seal_value_log),
                    on_off(want)
                )));
            }
        }
        Ok(Some(KeyState::new(registry, opts)))
    }

    /// Writes the key registry of a new store.
    pub fn create(opts: &crate::Options, dir: &Path, enc: &Encryption) -> Result<KeyState> {
        let registry = Registry::new(enc, &keys_path(dir))?;
        let state = KeyState::new(registry, opts);
        state
            .registry
            .lock()
            .save(&*opts.fs, dir, &*state.backend)?;
        Ok(state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env::OsFs;

    #[test]
    fn argon2_costs_past_the_bounds_are_refused_at_creation_and_on_load() {
        let dir = tempfile::tempdir().unwrap();
        let path = keys_path(dir.path());
        let mut enc = Encryption::with_passphrase("p");
        enc.kdf = KdfParams {
            m_cost_kib: KdfParams::MAX_M_COST_KIB + 1,
            t_cost: 1,
            p_cost: 1,
        };
        assert!(matches!(
            Registry::new(&enc, &path),
            Err(Error::InvalidArgument(_))
        ));
        // A header forged to ask for 4 TiB is damage, found before any
        // key derivation runs.
        enc.kdf = KdfParams {
            m_cost_kib: 8,
            t_cost: 1,
            p_cost: 1,
        };
        let backend = gvault_accel::CpuBackend::with_threads(1);
        let r = Registry::new(&enc, &path).unwrap();
        r.save(&OsFs, dir.path(), &backend).unwrap();
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        std::fs::write(&path, &bytes).unwrap();
        match Registry::load(&OsFs, dir.path(), &enc, &backend) {
            Err(Error::Corruption { reason, .. }) => assert!(reason.contains("bounds"), "{reason}"),
            Err(e) => panic!("expected corruption, got {e}"),
            Ok(_) => panic!("a forged header opened"),
        }
    }

    #[test]
    fn registry_flags_round_trip_and_version_1_reads_as_fully_sealed() {
        let d = tempfile::tempdir().unwrap();
        let backend = CpuBackend::shared();
        let enc = Encryption {
            seal_value_log: Some(false),
            ..Encryption::with_key(generate_key())
        };
        let r = Registry::new(&enc, &keys_path(d.path())).unwrap();
        r.save(&OsFs, d.path(), &*backend).unwrap();
        let back = Registry::load(&OsFs, d.path(), &enc, &*backend).unwrap();
        assert!(!back.seal_value_log);
        assert_eq!(back.keys.len(), 1);
        // A version-1 registry (written before the flags word) has every
        // file sealed.
        r.save_as(&OsFs, d.path(), &*backend, 1).unwrap();
        let back = Registry::load(&OsFs, d.path(), &enc, &*backend).unwrap();
        assert!(back.seal_value_log);
        // A future version is refused, not misread.
        r.save_as(&OsFs, d.path(), &*backend, VERSION + 1).unwrap();
        assert!(matches!(
            Registry::load(&OsFs, d.path(), &enc, &*backend),
            Err(Error::Unsupported { .. })
        ));
    }
}
