//! One core's AES-256-GCM seal of one small buffer over and over, through
//! the CPU backend's job path and through aws-lc directly: what a job costs
//! beyond the cipher. `cargo run --release -p gvault-accel --example
//! gcm_small [BYTES,...]` (default 16384,65536,1048576).

use std::time::Instant;

use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM};
use gvault_accel::*;

fn main() {
    let sizes: Vec<usize> = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "16384,65536,1048576".into())
        .split(',')
        .filter_map(|s| s.parse().ok())
        .collect();
    for size in sizes {
        one_size(size);
    }
}

fn one_size(size: usize) {
    let reps = (4usize << 30) / size;
    let key = Aes256Key::from_bytes([7; 32]);
    let mut buf = vec![1u8; size];
    let one = CpuBackend::with_own_pool(1);
    let direct = LessSafeKey::new(UnboundKey::new(&AES_256_GCM, &[7; 32]).unwrap());
    for round in 0..3 {
        let start = Instant::now();
        for i in 0..reps {
            let mut job = Job::Seal {
                key: &key,
                segments: vec![SealSegment {
                    nonce: Nonce96::from_bytes([i as u8; 12]),
                    aad: b"",
                    data: DataMut::Host(&mut buf),
                }],
            };
            std::hint::black_box(one.run(&mut job).unwrap());
        }
        let job = (size * reps) as f64 / start.elapsed().as_secs_f64() / 1e9;
        let start = Instant::now();
        for i in 0..reps {
            let nonce = Nonce::assume_unique_for_key([i as u8; 12]);
            let _ = std::hint::black_box(
                direct
                    .seal_in_place_separate_tag(nonce, Aad::empty(), &mut buf)
                    .unwrap(),
            );
        }
        let raw = (size * reps) as f64 / start.elapsed().as_secs_f64() / 1e9;
        println!("{size} bytes, round {round}: job {job:.2} GB/s, aws-lc {raw:.2} GB/s, job/aws-lc {:.3}", job / raw);
    }
}
