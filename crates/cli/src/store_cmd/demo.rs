//! `gvault demo`: write and read back mixed-size values in a temporary
//! store and report throughput.

use std::time::Instant;

use gvault_store::{Options, Store, WriteBatch, WriteOptions};

use super::CmdResult;

/// Deterministic bytes for demo value `i`, cheap enough not to dominate.
fn demo_value(i: u64, len: usize) -> Vec<u8> {
    let mut x = i.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.truncate(len);
    v
}

pub fn demo(mb: u64) -> CmdResult {
    const SIZES: [usize; 6] = [100, 400, 1500, 4096, 16 << 10, 100 << 10];
    let target = mb << 20;
    let tmp = tempfile::Builder::new().prefix("gvault-demo-").tempdir()?;
    let s = Store::open(tmp.path(), Options::default())?;
    println!(
        "demo store in {} ({mb} MiB of values)",
        tmp.path().display()
    );

    let bar = |len: u64, what: &str| {
        let b = indicatif::ProgressBar::new(len);
        b.set_style(
            indicatif::ProgressStyle::with_template(
                "{msg:>6} [{bar:40}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
            )
            .expect("valid template")
            .progress_chars("=> "),
        );
        b.set_message(what.to_string());
        b
    };

    let mut sizes = Vec::new();
    let mut total = 0u64;
    while total < target {
        let len = SIZES[sizes.len() % SIZES.len()];
        sizes.push(len);
        total += len as u64;
    }
    let key = |i: usize| format!("demo-{i:09}");

    let pb = bar(total, "write");
    let start = Instant::now();
    let mut batch = WriteBatch::new();
    let mut done = 0u64;
    for (i, &len) in sizes.iter().enumerate() {
        batch.put(key(i), demo_value(i as u64, len));
        done += len as u64;
        if batch.approximate_bytes() >= 1 << 20 {
            s.write(&WriteOptions::default(), std::mem::take(&mut batch))?;
            pb.set_position(done);
        }
    }
    s.write(&WriteOptions::SYNC, batch)?;
    s.flush()?;
    let write_s = start.elapsed().as_secs_f64();
    pb.finish_and_clear();

    let pb = bar(total, "read");
    let start = Instant::now();
    let mut done = 0u64;
    for (i, &len) in sizes.iter().enumerate() {
        let got = s.get(key(i))?;
        if got.as_deref() != Some(&demo_value(i as u64, len)[..]) {
            return Err(format!("read back the wrong value for {}", key(i)).into());
        }
        done += len as u64;
        if i % 256 == 0 {
            pb.set_position(done);
        }
    }
    let read_s = start.elapsed().as_secs_f64();
    pb.finish_and_clear();

    let mib = total as f64 / (1 << 20) as f64;
    println!(
        "wrote {} values, {mib:.0} MiB in {write_s:.2} s: {:.0} MiB/s (group commit, flushed to tables)",
        sizes.len(),
        mib / write_s
    );
    println!(
        "read back and checked every value in {read_s:.2} s: {:.0} MiB/s",
        mib / read_s
    );
    print!("{}", s.stats());
    s.close()?;
    Ok(0)
}
