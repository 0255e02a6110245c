//! Keys, nonces, IVs and tags as distinct types, so that a nonce cannot be
//! passed where a key is expected and a 12-byte nonce cannot be 16 bytes.
//! Secret key material is wiped on drop and never printed by `Debug`.

use std::fmt;
use zeroize::{Zeroize, ZeroizeOnDrop};

use crate::error::KeyError;

/// Defines a fixed-size secret key type: zeroized on drop, redacted in `Debug`.
macro_rules! secret_key {
    ($(#[$doc:meta])* $name:ident, $len:expr) => {
        $(#[$doc])*
        #[derive(Clone, Zeroize, ZeroizeOnDrop, PartialEq, Eq)]
        pub struct $name([u8; $len]);

        impl $name {
            pub const LEN: usize = $len;

            pub fn from_bytes(bytes: [u8; $len]) -> Self {
                Self(bytes)
            }

            pub fn try_from_slice(bytes: &[u8]) -> Result<Self, KeyError> {
                let arr: [u8; $len] = bytes.try_into().map_err(|_| KeyError::Length {
                    what: stringify!($name),
                    expected: $len,
                    got: bytes.len(),
                })?;
                Ok(Self(arr))
            }

            /// The raw key bytes, for handing to a cipher implementation.
            pub fn expose(&self) -> &[u8; $len] {
                &self.0
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!(stringify!($name), "(redacted)"))
            }
        }
    };
}

secret_key!(
    /// An AES-256 key (for GCM and CTR).
    Aes256Key,
    32
);
secret_key!(
    /// A BLAKE3 key for keyed hashing (chunk ids are keyed so that they reveal
    /// nothing across stores).
    Blake3Key,
    32
);
secret_key!(
    /// A TEA key: four big-endian 32-bit words.
    TeaKey,
    16
);

impl TeaKey {
    /// The key as TEA's four words k0..k3 (big-endian).
    pub fn words(&self) -> [u32; 4] {
        let b = self.expose();
        std::array::from_fn(|i| {
            u32::from_be_bytes([b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]])
        })
    }
}

/// A Blowfish key: 4 to 56 bytes (32 to 448 bits).
#[derive(Clone, Zeroize, ZeroizeOnDrop, PartialEq, Eq)]
pub struct BlowfishKey(Vec<u8>);

impl BlowfishKey {
    pub const MIN_LEN: usize = 4;
    pub const MAX_LEN: usize = 56;

    pub fn try_from_slice(bytes: &[u8]) -> Result<Self, KeyError> {
        if !(Self::MIN_LEN..=Self::MAX_LEN).contains(&bytes.len()) {
            return Err(KeyError::Length {
                what: "BlowfishKey",
                expected: Self::MAX_LEN,
                got: bytes.len(),
            });
        }
        Ok(Self(bytes.to_vec()))
    }

    pub fn expose(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for BlowfishKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BlowfishKey({} bytes, redacted)", self.0.len())
    }
}

/// Defines a public fixed-size value (nonce, IV, tag): no secrecy, but its
/// own type, built only through its constructors (so a layout such as
/// [`Nonce96::from_parts`] has one place) and read through `as_bytes`.
macro_rules! public_bytes {
    ($(#[$doc:meta])* $name:ident, $len:expr) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
        pub struct $name([u8; $len]);

        impl $name {
            pub const LEN: usize = $len;

            pub const fn from_bytes(bytes: [u8; $len]) -> Self {
                Self(bytes)
            }

            pub fn try_from_slice(bytes: &[u8]) -> Result<Self, KeyError> {
                let arr: [u8; $len] = bytes.try_into().map_err(|_| KeyError::Length {
                    what: stringify!($name),
                    expected: $len,
                    got: bytes.len(),
                })?;
                Ok(Self(arr))
            }

            pub fn as_bytes(&self) -> &[u8; $len] {
                &self.0
            }
        }
    };
}

public_bytes!(
    /// A 96-bit AES-GCM nonce. Must never repeat under one key.
    Nonce96,
    12
);
public_bytes!(
    /// A 128-bit GCM authentication tag.
    Tag,
    16
);
public_bytes!(
    /// The initial 128-bit counter block of AES-CTR (incremented as one
    /// 128-bit big-endian integer, as OpenSSL does).
    Iv128,
    16
);
public_bytes!(
    /// The initial 64-bit counter of a 64-bit block cipher in CTR mode
    /// (TEA, Blowfish), big-endian.
    Iv64,
    8
);

impl Nonce96 {
    /// The store's nonce layout: file number (64 bits) ‖ block number (32 bits).
    pub fn from_parts(file: u64, block: u32) -> Self {
        let mut n = [0u8; 12];
        n[..8].copy_from_slice(&file.to_be_bytes());
        n[8..].copy_from_slice(&block.to_be_bytes());
        Self(n)
    }
}

/// A counter block for a CTR-mode segment: its width must match the cipher's
/// block size, which is checked per segment (a mismatch is a segment error).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum CtrIv {
    B128(Iv128),
    B64(Iv64),
}

impl CtrIv {
    pub fn len(&self) -> usize {
        match self {
            CtrIv::B128(_) => 16,
            CtrIv::B64(_) => 8,
        }
    }

    pub fn is_empty(&self) -> bool {
        false
    }
}
