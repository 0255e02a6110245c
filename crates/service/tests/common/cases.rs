//! Random jobs of every op with awkward sizes, good and bad segments, for
//! comparing a backend against the CPU.

use gvault_accel::{
    Aes256Key, Backend, Blake3Key, BlowfishKey, ChunkParams, CtrCipher, CtrIv, CtrSegment, Data,
    DataMut, DigestAlgo, Iv128, Iv64, Job, Nonce96, OpenSegment, RsaPrivateKey, SealSegment,
    SegmentResult, Tag, TeaKey,
};
use rand::rngs::StdRng;
use rand::{Rng, RngCore, SeedableRng};

use super::RSA_PEM;

const AWKWARD: [usize; 9] = [0, 1, 15, 16, 17, 4095, 4096, 65_536 + 3, (1 << 20) + 13];

fn size(rng: &mut StdRng, max: usize) -> usize {
    if rng.gen_bool(0.5) {
        AWKWARD[rng.gen_range(0..AWKWARD.len())]
    } else {
        rng.gen_range(0..max)
    }
}

fn bytes(rng: &mut StdRng, n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    rng.fill_bytes(&mut v);
    v
}

pub struct Keys {
    aes: Aes256Key,
    blake3: Blake3Key,
    tea: TeaKey,
    blowfish: BlowfishKey,
    rsa: RsaPrivateKey,
}

impl Keys {
    pub fn new(rng: &mut StdRng) -> Keys {
        let mut k = [0u8; 32];
        rng.fill_bytes(&mut k);
        let aes = Aes256Key::from_bytes(k);
        rng.fill_bytes(&mut k);
        let blake3 = Blake3Key::from_bytes(k);
        let mut t = [0u8; 16];
        rng.fill_bytes(&mut t);
        Keys {
            aes,
            blake3,
            tea: TeaKey::from_bytes(t),
            blowfish: BlowfishKey::try_from_slice(&bytes(rng, 20)).unwrap(),
            rsa: RsaPrivateKey::from_pem(RSA_PEM).unwrap(),
        }
    }
}

/// How many kinds of job `run_case` makes (`which` in `0..OPS`).
pub const OPS: u32 = 15;

/// Runs one random job of kind `which` on `b`, segments up to about
/// `max` bytes; returns its results and the buffers after.
pub fn run_case(
    b: &dyn Backend,
    which: u32,
    seed: u64,
    keys: &Keys,
    max: usize,
) -> (Vec<SegmentResult>, Vec<Vec<u8>>) {
    let mut rng = StdRng::seed_from_u64(seed);
    let n = rng.gen_range(1..6);
    let mut bufs: Vec<Vec<u8>> = (0..n)
        .map(|_| {
            let s = size(&mut rng, max);
            bytes(&mut rng, s)
        })
        .collect();
    let nonces: Vec<Nonce96> = (0..n)
        .map(|i| Nonce96::from_parts(seed, i as u32))
        .collect();
    let aads: Vec<Vec<u8>> = (0..n)
        .map(|_| {
            let s = rng.gen_range(0..40);
            bytes(&mut rng, s)
        })
        .collect();
    let params = ChunkParams::new(4096, 16384, 65536, 2).unwrap();
    let results = match which {
        0 => {
            let mut job = Job::Seal {
                key: &keys.aes,
                segments: bufs
                    .iter_mut()
                    .zip(&nonces)
                    .zip(&aads)
                    .map(|((d, n), a)| SealSegment {
                        nonce: *n,
                        aad: a,
                        data: DataMut::Host(d),
                    })
                    .collect(),
            };
            b.run(&mut job).unwrap()
        }
        1 => {
            // Open with random tags: all fail; a sealed round trip is
            // checked separately below.
            let tags: Vec<Tag> = (0..n)
                .map(|_| {
                    let mut t = [0u8; 16];
                    rng.fill_bytes(&mut t);
                    Tag::from_bytes(t)
                })
                .collect();
            let mut job = Job::Open {
                key: &keys.aes,
                segments: bufs
                    .iter_mut()
                    .zip(&nonces)
                    .zip(&aads)
                    .zip(&tags)
                    .map(|(((d, n), a), t)| OpenSegment {
                        nonce: *n,
                        aad: a,
                        tag: *t,
                        data: DataMut::Host(d),
                    })
                    .collect(),
            };
            b.run(&mut job).unwrap()
        }
        2..=4 => {
            let cipher = match which {
                2 => CtrCipher::Aes256(&keys.aes),
                3 => CtrCipher::Tea(&keys.tea),
                _ => CtrCipher::Blowfish(&keys.blowfish),
            };
            let mut job = Job::Ctr {
                cipher,
                segments: bufs
                    .iter_mut()
                    .enumerate()
                    .map(|(i, d)| CtrSegment {
                        // Some segments get the wrong counter width.
                        iv: if (i == 1) ^ (which == 2) {
                            CtrIv::B128(Iv128::from_bytes([i as u8; 16]))
                        } else {
                            CtrIv::B64(Iv64::from_bytes([i as u8; 8]))
                        },
                        data: DataMut::Host(d),
                    })
                    .collect(),
            };
            b.run(&mut job).unwrap()
        }
        5..=10 => {
            let algo = match which {
                5 => DigestAlgo::Blake3,
                6 => DigestAlgo::Blake3Keyed(&keys.blake3),
                7 => DigestAlgo::Sha256,
                8 => DigestAlgo::Md5,
                9 => DigestAlgo::Crc32,
                _ => DigestAlgo::Crc32c,
            };
            let mut job = Job::Digest {
                algo,
                segments: bufs.iter().map(|d| Data::Host(d)).collect(),
            };
            b.run(&mut job).unwrap()
        }
        11 => {
            let mut job = Job::Chunk {
                params,
                segments: bufs.iter().map(|d| Data::Host(d)).collect(),
            };
            b.run(&mut job).unwrap()
        }
        12 | 13 => {
            let mut job = Job::ChunkDigest {
                params,
                key: &keys.blake3,
                crc32c: which == 13,
                segments: bufs.iter().map(|d| Data::Host(d)).collect(),
            };
            b.run(&mut job).unwrap()
        }
        _ => {
            // RSA: inputs of the modulus length, some out of range.
            let size = keys.rsa.size();
            let modulus = keys.rsa.modulus();
            let ins: Vec<Vec<u8>> = (0..n)
                .map(|i| match i {
                    0 => vec![0u8; size],
                    1 => modulus.clone(),
                    2 => vec![1u8; size - 1],
                    _ => {
                        let mut v = bytes(&mut rng, size);
                        v[0] &= 0x7f;
                        v
                    }
                })
                .collect();
            let mut job = Job::RsaPrivate {
                key: &keys.rsa,
                segments: ins.iter().map(|v| v.as_slice()).collect(),
            };
            b.run(&mut job).unwrap()
        }
    };
    (results, bufs)
}
