//! Keys clients registered. A handle is valid on its connection only; the
//! key behind it is shared with other connections that registered the same
//! material (so their small requests can share one job), and wiped (the
//! accel key types zero themselves on drop) when the last connection and
//! the last in-flight job holding it let go.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use gvault_accel::{Aes256Key, Blake3Key, BlowfishKey, RsaPrivateKey, TeaKey};
use rsa::pkcs1::DecodeRsaPrivateKey;

use crate::protocol::KeyKind;

pub enum Key {
    Aes256(Aes256Key),
    Blake3(Blake3Key),
    Tea(TeaKey),
    Blowfish(BlowfishKey),
    Rsa(Box<RsaPrivateKey>),
}

impl Key {
    fn parse(kind: KeyKind, material: &[u8]) -> Result<Key, String> {
        let len_err = |e: gvault_accel::KeyError| e.to_string();
        Ok(match kind {
            KeyKind::Aes256 => Key::Aes256(Aes256Key::try_from_slice(material).map_err(len_err)?),
            KeyKind::Blake3 => Key::Blake3(Blake3Key::try_from_slice(material).map_err(len_err)?),
            KeyKind::Tea => Key::Tea(TeaKey::try_from_slice(material).map_err(len_err)?),
            KeyKind::Blowfish => {
                Key::Blowfish(BlowfishKey::try_from_slice(material).map_err(len_err)?)
            }
            KeyKind::Rsa => {
                let inner = rsa::RsaPrivateKey::from_pkcs1_der(material)
                    .map_err(|e| format!("not an RSA private key in PKCS#1 DER: {e}"))?;
                Key::Rsa(Box::new(RsaPrivateKey::from_key(inner).map_err(len_err)?))
            }
        })
    }
}

/// The daemon's table of live keys, by a keyed digest of their material
/// (the digest key is random per daemon, so the table says nothing about
/// a key to anyone who reads memory without it).
pub struct Interner {
    salt: [u8; 32],
    live: Mutex<HashMap<[u8; 32], Weak<Key>>>,
}

impl Interner {
    pub fn new() -> Self {
        let mut salt = [0u8; 32];
        rand::Rng::fill(&mut rand::thread_rng(), &mut salt[..]);
        Self {
            salt,
            live: Mutex::new(HashMap::new()),
        }
    }

    /// The key for this material: the live one if another connection
    /// registered the same, else a new one.
    pub fn intern(&self, kind: KeyKind, material: &[u8]) -> Result<Arc<Key>, String> {
        let mut h = blake3::Hasher::new_keyed(&self.salt);
        h.update(&[kind as u8]);
        h.update(material);
        let id: [u8; 32] = h.finalize().into();
        let lock = || self.live.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(k) = lock().get(&id).and_then(Weak::upgrade) {
            return Ok(k);
        }
        // Parsed outside the lock (an RSA key takes milliseconds).
        let key = Arc::new(Key::parse(kind, material)?);
        let mut live = lock();
        if let Some(k) = live.get(&id).and_then(Weak::upgrade) {
            return Ok(k);
        }
        if live.len() >= 1024 {
            live.retain(|_, w| w.strong_count() > 0);
        }
        live.insert(id, Arc::downgrade(&key));
        Ok(key)
    }
}

impl Default for Interner {
    fn default() -> Self {
        Self::new()
    }
}
