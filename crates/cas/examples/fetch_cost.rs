//! The host side of a GPU checkpoint load, without a GPU: a checkpoint of
//! pseudo-random bytes saved through the host path, then every group of
//! chunks fetched (`checkpoint::fetch`, what each load worker does before
//! its copy to the device) by N threads; GB/s per thread count.
//!
//!     cargo run --release -p gvault-cas --example fetch_cost -- DIR [MIB] [THREADS...]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use gvault_cas::accel_jobs::cpu_backend;
use gvault_cas::checkpoint::{self, Saver, Source, SCRATCH_BYTES};
use gvault_cas::{InitOptions, Repository};
use gvault_store::keys::generate_key;
use gvault_store::Encryption;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(dir) = args.first().map(std::path::PathBuf::from) else {
        eprintln!("usage: fetch_cost DIR [MIB] [THREADS...]");
        std::process::exit(2);
    };
    let mib: usize = args.get(1).map_or(1024, |s| s.parse().expect("MIB"));
    let threads: Vec<usize> = if args.len() > 2 {
        args[2..]
            .iter()
            .map(|s| s.parse().expect("THREADS"))
            .collect()
    } else {
        vec![1, 2, 4]
    };
    let enc = Encryption::with_key(generate_key());
    let repo = Arc::new(
        Repository::init(
            &dir.join("repo"),
            &enc,
            InitOptions::default(),
            cpu_backend(),
        )
        .expect("init"),
    );
    let mut data = vec![0u8; mib << 20];
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for w in data.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        w.copy_from_slice(&x.to_le_bytes()[..w.len()]);
    }
    let manifest = b"{}".to_vec();
    let srcs = vec![
        Source::Host {
            ptr: manifest.as_ptr() as usize,
            len: manifest.len(),
        },
        Source::Host {
            ptr: data.as_ptr() as usize,
            len: data.len(),
        },
    ];
    let t = Instant::now();
    let mut saver = Saver::new(repo.clone()).expect("saver");
    let chunks = checkpoint::chunk_sources(&repo, &*cpu_backend(), &srcs).expect("chunk");
    let mut plans = saver.add(srcs, chunks).expect("add");
    plans.extend(saver.take_rest());
    for p in plans {
        let sealed = saver.seal_host(&p).expect("seal");
        saver.put(sealed).expect("put");
    }
    let snap = saver.commit("bench").expect("commit");
    println!("saved {mib} MiB in {:.2} s", t.elapsed().as_secs_f64());
    let opened = checkpoint::open(&repo, &snap).expect("open");
    let chunks = &opened.segments[0];
    let groups = checkpoint::groups(chunks, SCRATCH_BYTES as u64);
    let mut firsts = Vec::with_capacity(groups.len());
    let mut off = 0u64;
    for &(s, e) in &groups {
        firsts.push(off);
        off += chunks[s..e].iter().map(|c| c.len as u64).sum::<u64>();
    }
    for &n in &threads {
        let next = AtomicUsize::new(0);
        let t = Instant::now();
        std::thread::scope(|s| {
            for _ in 0..n {
                s.spawn(|| {
                    let mut buf = vec![0u8; SCRATCH_BYTES];
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(&(s, e)) = groups.get(i) else { break };
                        checkpoint::fetch(&repo, &chunks[s..e], firsts[i], &mut buf)
                            .expect("fetch");
                    }
                });
            }
        });
        let dt = t.elapsed().as_secs_f64();
        println!(
            "{n:>3} threads: {:.2} GB/s ({} groups)",
            data.len() as f64 / dt / 1e9,
            groups.len()
        );
    }
}
