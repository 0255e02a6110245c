//! What the RSA batch host path costs a message on the CPU, without a GPU:
//! blinding and layout before the launch, unblinding and the public-exponent
//! check after it (an executor that returns zeros stands in for the kernel,
//! so every check runs in full and fails). Per-message microseconds of
//! wall time, and of one core when run with RAYON_NUM_THREADS=1.
//!
//!     cargo run --release -p gvault-accel --example rsa_host_cost -- [bits] [messages]

use std::time::Instant;

use gvault_accel::rsa_batch::{run_with, Launch};
use gvault_accel::{RsaItem, RsaOptions, RsaPrivateKey};
use rand::{RngCore, SeedableRng};

fn main() {
    let mut args = std::env::args().skip(1);
    let bits: usize = args.next().map_or(2048, |a| a.parse().expect("bits"));
    let n: usize = args.next().map_or(16384, |a| a.parse().expect("messages"));
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    let key = RsaPrivateKey::from_key(rsa::RsaPrivateKey::new(&mut rng, bits).unwrap()).unwrap();
    let size = key.size();
    let inputs: Vec<Vec<u8>> = (0..n)
        .map(|_| {
            let mut m = vec![0u8; size];
            rng.fill_bytes(&mut m[1..]);
            m
        })
        .collect();
    let items: Vec<RsaItem<'_>> = inputs
        .iter()
        .map(|m| RsaItem {
            key: &key,
            input: m,
        })
        .collect();
    for round in 0..3 {
        let t0 = Instant::now();
        let mut t_exec = None;
        let mut exec = |l: &Launch| -> Result<Vec<u32>, String> {
            t_exec = Some(Instant::now());
            Ok(vec![0u32; l.messages() * 2 * l.limbs])
        };
        let r = run_with(&items, RsaOptions::default(), &mut exec).unwrap();
        let total = t0.elapsed();
        let before = t_exec.unwrap() - t0;
        let us = |d: std::time::Duration| d.as_secs_f64() * 1e6 / n as f64;
        println!(
            "round {round}: RSA-{bits} x {n}: before the launch {:.2} us/msg, after {:.2} us/msg, total {:.2} us/msg ({} results)",
            us(before),
            us(total - before),
            us(total),
            r.len()
        );
    }
}
