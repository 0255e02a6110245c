//! `gvault demo`: write and read back mixed-size values in a temporary
//! store and report throughput; then back up a generated tree into a
//! temporary gvault-cas repository, change a few percent of it, back it up
//! again, and show what deduplication saved.

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
    dedup_demo(tmp.path(), (mb / 4).clamp(1, 64))
}

/// Backs up a tree of `mb` MiB, changes a few percent of it, backs it up
/// again, and restores and checks the second backup.
fn dedup_demo(dir: &std::path::Path, mb: u64) -> CmdResult {
    use gvault_cas::{accel_jobs, Chunker, InitOptions, Repository};
    const FILES: usize = 32;
    let src = dir.join("tree");
    std::fs::create_dir_all(&src)?;
    let file_len = ((mb << 20) as usize / FILES).max(64 << 10);
    let mut files: Vec<(String, Vec<u8>)> = (0..FILES)
        .map(|i| {
            (
                format!("file-{i:02}"),
                demo_value(1 << 32 | i as u64, file_len),
            )
        })
        .collect();
    for (name, data) in &files {
        std::fs::write(src.join(name), data)?;
    }
    let enc = gvault_store::Encryption::with_key(gvault_store::keys::generate_key());
    let opts = InitOptions {
        // Small chunks, so that edits inside a file show.
        chunker: Chunker::Cdc {
            min: 16 << 10,
            avg: 64 << 10,
            max: 256 << 10,
        },
        compression: false,
    };
    let repo = Repository::init(&dir.join("repo"), &enc, opts, accel_jobs::cpu_backend())?;
    let roots = std::slice::from_ref(&src);
    let total: u64 = files.iter().map(|f| f.1.len() as u64).sum();
    let mib = |b: u64| b as f64 / (1 << 20) as f64;

    let start = Instant::now();
    let first = gvault_cas::backup(&repo, roots, &mut |_| {})?;
    let first_s = start.elapsed().as_secs_f64();
    println!(
        "backed up a tree of {FILES} files, {:.1} MiB, into a deduplicating repository in {first_s:.2} s: {:.1} MiB added",
        mib(total),
        mib(first.bytes_added)
    );

    // A few percent changes: one file rewritten, two edited in place, one
    // with bytes inserted in the middle (content-defined chunks resync
    // after it), and a new file.
    let mut changed = 0u64;
    files[3].1 = demo_value(7 << 32, file_len);
    changed += file_len as u64;
    for i in [10, 20] {
        let at = file_len / 3;
        let end = (at + 4096).min(file_len);
        files[i].1[at..end].iter_mut().for_each(|b| *b ^= 0x5a);
        changed += (end - at) as u64;
    }
    let insert = demo_value(9 << 32, 1024);
    files[25].1.splice(file_len / 2..file_len / 2, insert);
    changed += 1024;
    files.push(("file-new".into(), demo_value(11 << 32, 64 << 10)));
    changed += 64 << 10;
    for i in [3, 10, 20, 25, FILES] {
        std::fs::write(src.join(&files[i].0), &files[i].1)?;
    }
    let total2: u64 = files.iter().map(|f| f.1.len() as u64).sum();

    let start = Instant::now();
    let second = gvault_cas::backup(&repo, roots, &mut |_| {})?;
    let second_s = start.elapsed().as_secs_f64();
    println!(
        "changed {:.1}% of it and backed it up again in {second_s:.2} s ({} files unchanged, not read): \
         {:.1} MiB added, {:.1}% of the first backup's",
        changed as f64 * 100.0 / total2 as f64,
        second.files_unchanged,
        mib(second.bytes_added),
        second.bytes_added as f64 * 100.0 / first.bytes_added.max(1) as f64
    );

    let start = Instant::now();
    let snap = gvault_cas::Snapshot::read(&repo, &second.snapshot)?;
    let out = dir.join("restored");
    let r = gvault_cas::restore(&repo, &snap, &out, None, &|_, _| {})?;
    if !r.failed.is_empty() {
        return Err(format!("restore failed for {:?}", r.failed).into());
    }
    let back = out.join(src.strip_prefix("/").unwrap_or(&src));
    for (name, data) in &files {
        if std::fs::read(back.join(name))? != *data {
            return Err(format!("restored {name} differs from the source").into());
        }
    }
    println!(
        "restored the second backup in {:.2} s and checked every byte: identical",
        start.elapsed().as_secs_f64()
    );
    Ok(0)
}
