//! `gvault bench cas`: seed 001 §4 on gvault's repository. For each
//! workload (see `workload`), chunker (content-defined or fixed blocks) and
//! backend (`cpu`: all cores; `auto`: CPU and GPU by the cost model;
//! `oracle`: seed 001's CA-Infinite, chunk ids known in advance), one run
//! backs up version 1 into a new repository, turns the data into version 2
//! and backs that up (the parent's unchanged files are not read), then
//! restores version 2 and checks it against the source. Reported: GB/s of
//! each step (bytes of the snapshot over wall time), the share of version
//! 2's bytes that were new, bytes added, and CPU seconds per GB (the
//! process's user + system time: what is left for other programs).
//!
//! Bounds measured in the same run: the page-cache read rate of the data
//! (one reader, and every core reading 2 MiB pieces as a backup does) and
//! the write rate of the repository's file system (one writer of 16 MiB
//! writes, then fsync; every core writing 16 MiB files, as packs are
//! written; every core writing one file through a mapping, as a restore
//! writes one large file).

mod oracle;
mod plot;
mod s3;
mod workload;

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use gvault_accel::Backend;
use gvault_cas::{Chunker, InitOptions, Repository};
use gvault_store::Encryption;
use serde::Serialize;

use super::measure::{err, files_write_rate, gbps, memory_dir, parse_nonzero_size};

#[derive(clap::Args, Debug)]
pub struct CasArgs {
    /// Workloads: single, different, similar, checkpoint, tree
    /// [default: all; with --repo s3://…: single].
    #[arg(long, value_delimiter = ',')]
    workloads: Vec<String>,
    /// Bytes of each workload's version 1 (e.g. 1G, 16G)
    /// [default: 1G; with --repo s3://…: 64M].
    #[arg(long)]
    size: Option<String>,
    /// Backends: cpu, auto, oracle, service (a running `gvault serve`; --repo
    /// s3://… measures cpu only).
    #[arg(long, value_delimiter = ',', default_value = "cpu,auto,oracle")]
    backends: Vec<String>,
    /// Chunkers: cdc (FastCDC 512 KiB / 1 MiB / 8 MiB), fixed (1 MiB blocks)
    /// [default: cdc,fixed; with --repo s3://…: cdc].
    #[arg(long, value_delimiter = ',')]
    chunkers: Vec<String>,
    /// Where the data is generated (default: /dev/shm if present, else the
    /// temporary directory; the data is read from the page cache either way).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Where the repositories and restores go; repeat for several file
    /// systems (default: /dev/shm if present, else the temporary directory).
    #[arg(long)]
    repo_dir: Vec<PathBuf>,
    /// Runs of each configuration; the median is reported
    /// [default: 1; with --repo s3://…: 3].
    #[arg(long)]
    repeat: Option<usize>,
    /// Compare an S3 repository with a local directory instead: backup and
    /// restore of the same data to s3://BUCKET/PREFIX (a scratch prefix
    /// under it per run, deleted after) and to the first --repo-dir, for
    /// each --s3-connections count (credentials from AWS_ACCESS_KEY_ID,
    /// AWS_SECRET_ACCESS_KEY, AWS_REGION).
    #[arg(long, value_name = "s3://BUCKET/PREFIX")]
    repo: Option<String>,
    /// The S3 server's URL [default: $AWS_ENDPOINT_URL, else AWS].
    #[arg(long, value_name = "URL", requires = "repo")]
    s3_endpoint: Option<String>,
    /// Connection counts to sweep with --repo.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16")]
    s3_connections: Vec<usize>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Also write the JSON report to this file.
    #[arg(long)]
    save: Option<PathBuf>,
    /// Draw the results as a PNG figure (not with --repo).
    #[arg(long, conflicts_with = "repo")]
    plot: Option<PathBuf>,
}

#[derive(Serialize, Clone, Debug)]
pub struct Row {
    workload: String,
    repo_fs: String,
    chunker: String,
    backend: String,
    bytes_v1: u64,
    bytes_v2: u64,
    backup1_gbps: f64,
    backup2_gbps: f64,
    restore_gbps: f64,
    /// Bytes of version 2 that were new after dedup (plaintext), over its size.
    new_share_v2: f64,
    /// Bytes the second backup added to the repository (sealed, compressed).
    added_v2: u64,
    /// Repository size after both backups over the logical bytes of both.
    stored_ratio: f64,
    cpu_s_per_gb_backup1: f64,
    cpu_s_per_gb_backup2: f64,
    /// Chunk jobs the oracle answered and missed (oracle rows only).
    oracle_served: Option<u64>,
    oracle_missed: Option<u64>,
    /// The GPU's share of the bytes of accel jobs in backup 1, backup 2
    /// and the restore (auto rows only).
    gpu_share: Option<[f64; 3]>,
}

#[derive(Serialize)]
struct Bound {
    repo_fs: String,
    /// One writer, sequential.
    write_gbps: f64,
    /// Every core writing 16 MiB files, each fsynced.
    write_all_gbps: f64,
    /// Every core writing one file through a mapping (a restore's bound);
    /// none where the file system cannot reserve or map it.
    one_file_gbps: Option<f64>,
}

#[derive(Serialize)]
struct Report {
    cpus: usize,
    gpu: Option<String>,
    size: u64,
    /// One reader.
    read_gbps: f64,
    /// Every core, 2 MiB pieces.
    read_all_gbps: f64,
    bounds: Vec<Bound>,
    rows: Vec<Row>,
}

fn cpu_seconds() -> f64 {
    // SAFETY: getrusage writes only into the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) } != 0 {
        return 0.0;
    }
    let t = |v: libc::timeval| v.tv_sec as f64 + v.tv_usec as f64 / 1e6;
    t(u.ru_utime) + t(u.ru_stime)
}

fn chunker(name: &str) -> Result<Chunker, String> {
    match name {
        "cdc" => Ok(Chunker::DEFAULT),
        "fixed" => Ok(Chunker::Fixed { size: 1 << 20 }),
        c => Err(format!("unknown chunker {c} (cdc, fixed)")),
    }
}

fn dir_bytes(p: &Path) -> u64 {
    let mut n = 0;
    if let Ok(rd) = std::fs::read_dir(p) {
        for e in rd.flatten() {
            match e.metadata() {
                Ok(m) if m.is_dir() => n += dir_bytes(&e.path()),
                Ok(m) => n += m.len(),
                Err(_) => {}
            }
        }
    }
    n
}

/// Sequential write rate of the file system under `dir`.
fn write_rate(dir: &Path, size: u64) -> Result<f64, String> {
    use std::io::Write;
    let path = dir.join(format!("gvault-bench-write-{}", std::process::id()));
    let buf = vec![0x5au8; 16 << 20];
    let t = Instant::now();
    let r = (|| {
        let mut f = std::fs::File::create(&path)?;
        let mut done = 0u64;
        while done < size {
            f.write_all(&buf)?;
            done += buf.len() as u64;
        }
        f.sync_all()?;
        Ok::<u64, std::io::Error>(done)
    })();
    let el = t.elapsed();
    let _ = std::fs::remove_file(&path);
    let done = r.map_err(|e| format!("measuring writes to {}: {e}", dir.display()))?;
    Ok(gbps(done, el))
}

/// Write rate of one new file under `dir` filled by every core through a
/// shared mapping, its blocks reserved first: how a restore writes one
/// large file, so the bound of restoring one (`pwrite`s to one file
/// serialize on its inode lock; a mapping's page faults mostly do not).
fn one_file_rate(dir: &Path, size: u64) -> Result<f64, String> {
    use gvault_cas::mapped_file::{prefault, MappedFile};
    use rayon::prelude::*;
    let path = dir.join(format!("gvault-bench-one-file-{}", std::process::id()));
    let src = vec![0x5au8; 1 << 20];
    let t = Instant::now();
    let r = (|| {
        let f = std::fs::File::options()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)?;
        let Some(mut m) = MappedFile::create(&f, size)? else {
            return Err(std::io::Error::other("the file system cannot map it"));
        };
        m.bytes_mut().par_chunks_mut(src.len()).for_each(|piece| {
            prefault(piece);
            piece.copy_from_slice(&src[..piece.len()])
        });
        drop(m);
        f.sync_all()
    })();
    let el = t.elapsed();
    let _ = std::fs::remove_file(&path);
    r.map_err(|e| format!("measuring one file's writes in {}: {e}", dir.display()))?;
    Ok(gbps(size, el))
}

/// Every file under `dir`.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    fn walk(p: &Path, out: &mut Vec<PathBuf>) {
        if let Ok(rd) = std::fs::read_dir(p) {
            for e in rd.flatten() {
                if e.path().is_dir() {
                    walk(&e.path(), out)
                } else {
                    out.push(e.path())
                }
            }
        }
    }
    let mut files = Vec::new();
    walk(dir, &mut files);
    files
}

/// Page-cache read rate of every file under `dir`, one reader.
fn read_rate(dir: &Path) -> f64 {
    use std::io::Read;
    let mut buf = vec![0u8; 16 << 20];
    let t = Instant::now();
    let mut n = 0u64;
    for f in files_under(dir) {
        if let Ok(mut f) = std::fs::File::open(f) {
            while let Ok(k) = f.read(&mut buf) {
                if k == 0 {
                    break;
                }
                n += k as u64;
            }
        }
    }
    gbps(n, t.elapsed())
}

/// Page-cache read rate of every file under `dir`, every core reading 2
/// MiB pieces (as a backup reads a large file), into buffers each thread
/// reuses.
fn read_rate_parallel(dir: &Path) -> f64 {
    use rayon::prelude::*;
    use std::os::unix::fs::FileExt;
    const PIECE: u64 = 2 << 20;
    let mut pieces = Vec::new();
    let mut files = Vec::new();
    for p in files_under(dir) {
        if let Ok(f) = std::fs::File::open(p) {
            let len = f.metadata().map_or(0, |m| m.len());
            pieces.extend((0..len.div_ceil(PIECE)).map(|k| (files.len(), k * PIECE)));
            files.push(f);
        }
    }
    let t = Instant::now();
    let n: u64 = pieces
        .par_iter()
        .map_init(
            || vec![0u8; PIECE as usize],
            |buf, &(i, at)| files[i].read_at(buf, at).map_or(0, |k| k as u64),
        )
        .sum();
    gbps(n, t.elapsed())
}

struct Measured {
    row: Row,
}

fn one_run(
    workload: &str,
    data: &Path,
    repo_root: &Path,
    fs_name: &str,
    chunker_name: &str,
    backend_name: &str,
    size: u64,
) -> Result<Measured, String> {
    let enc = Encryption::with_key(gvault_store::keys::generate_key());
    let opts = InitOptions {
        chunker: chunker(chunker_name)?,
        compression: true,
    };
    let real: Arc<dyn Backend> = match backend_name {
        "cpu" => gvault_cas::accel_jobs::cpu_backend(),
        "auto" | "oracle" => gvault_cas::accel_jobs::auto_backend(),
        "service" => crate::serve_cmd::running_service("--backends service")?,
        b => return Err(format!("unknown backend {b} (cpu, auto, oracle, service)")),
    };
    let oracle = (backend_name == "oracle").then(|| Arc::new(oracle::Oracle::new(real.clone())));
    let accel: Arc<dyn Backend> = match &oracle {
        Some(o) => o.clone(),
        None => real,
    };
    let repo_dir = repo_root.join(format!("gvault-bench-repo-{}", std::process::id()));
    let restore_dir = repo_root.join(format!("gvault-bench-restore-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&repo_dir);
    let _ = std::fs::remove_dir_all(&restore_dir);
    let quiet = &mut |_: gvault_cas::Progress| {};
    if let Some(o) = &oracle {
        // The recording pass: the same two backups into a scratch repository.
        let scratch = repo_root.join(format!("gvault-bench-oracle-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&scratch);
        workload::create(workload, data, size).map_err(err("creating data"))?;
        let r = Repository::init(&scratch, &enc, opts, o.clone()).map_err(err("init"))?;
        gvault_cas::backup(&r, &[data.to_owned()], quiet).map_err(err("backup"))?;
        workload::mutate(workload, data, size).map_err(err("changing data"))?;
        let s = gvault_cas::backup(&r, &[data.to_owned()], quiet).map_err(err("backup"))?;
        let snap = gvault_cas::Snapshot::read(&r, &s.snapshot).map_err(err("snapshot"))?;
        gvault_cas::restore(&r, &snap, &restore_dir, None, &|_, _| {}).map_err(err("restore"))?;
        drop(r);
        let _ = std::fs::remove_dir_all(&scratch);
        let _ = std::fs::remove_dir_all(&restore_dir);
        o.replay();
    }
    workload::create(workload, data, size).map_err(err("creating data"))?;
    let repo = Repository::init(&repo_dir, &enc, opts, accel).map_err(err("init"))?;
    // Where auto placed each step's bytes (auto rows only).
    let auto = (backend_name == "auto").then(gvault_accel::AutoBackend::shared);
    let placed = || auto.as_ref().map(|a| a.placements());
    let share = |a: &gvault_accel::auto::Placements, b: &gvault_accel::auto::Placements| {
        let gpu = b.gpu_bytes - a.gpu_bytes;
        gpu as f64 / (gpu + b.cpu_bytes - a.cpu_bytes).max(1) as f64
    };
    let p0 = placed();
    let c0 = cpu_seconds();
    let t = Instant::now();
    let s1 = gvault_cas::backup(&repo, &[data.to_owned()], quiet).map_err(err("backup 1"))?;
    let t1 = t.elapsed();
    let c1 = cpu_seconds();
    let p1 = placed();
    workload::mutate(workload, data, size).map_err(err("changing data"))?;
    let c2 = cpu_seconds();
    let t = Instant::now();
    let s2 = gvault_cas::backup(&repo, &[data.to_owned()], quiet).map_err(err("backup 2"))?;
    let t2 = t.elapsed();
    let c3 = cpu_seconds();
    let p2 = placed();
    let snap = gvault_cas::Snapshot::read(&repo, &s2.snapshot).map_err(err("snapshot"))?;
    let t = Instant::now();
    let r = gvault_cas::restore(&repo, &snap, &restore_dir, None, &|_, _| {})
        .map_err(err("restore"))?;
    let t3 = t.elapsed();
    let p3 = placed();
    let gpu_share = match (p0, p1, p2, p3) {
        (Some(p0), Some(p1), Some(p2), Some(p3)) => {
            Some([share(&p0, &p1), share(&p1, &p2), share(&p2, &p3)])
        }
        _ => None,
    };
    if !r.failed.is_empty() {
        return Err(format!("restore failed for {:?}", r.failed));
    }
    verify(data, &restore_dir)?;
    let stored = dir_bytes(&repo_dir);
    drop(repo);
    let _ = std::fs::remove_dir_all(&repo_dir);
    let _ = std::fs::remove_dir_all(&restore_dir);
    let gb = |b: u64| b as f64 / 1e9;
    let per_gb = |c: f64, b: u64| if b == 0 { 0.0 } else { c / gb(b) };
    Ok(Measured {
        row: Row {
            workload: workload.into(),
            repo_fs: fs_name.into(),
            chunker: chunker_name.into(),
            backend: backend_name.into(),
            bytes_v1: s1.bytes_total,
            bytes_v2: s2.bytes_total,
            backup1_gbps: gbps(s1.bytes_total, t1),
            backup2_gbps: gbps(s2.bytes_total, t2),
            restore_gbps: gbps(r.bytes, t3),
            new_share_v2: s2.bytes_new_raw as f64 / s2.bytes_total.max(1) as f64,
            added_v2: s2.bytes_added,
            stored_ratio: stored as f64 / (s1.bytes_total + s2.bytes_total).max(1) as f64,
            cpu_s_per_gb_backup1: per_gb(c1 - c0, s1.bytes_total),
            cpu_s_per_gb_backup2: per_gb(c3 - c2, s2.bytes_total),
            oracle_served: oracle.as_ref().map(|o| o.served.load(Ordering::Relaxed)),
            oracle_missed: oracle.as_ref().map(|o| o.missed.load(Ordering::Relaxed)),
            gpu_share,
        },
    })
}

/// The restored tree under `restore` (which holds the data's absolute path)
/// equals the source, byte for byte.
fn verify(data: &Path, restore: &Path) -> Result<(), String> {
    let abs = std::path::absolute(data).map_err(err("path"))?;
    let rel: PathBuf = abs.components().skip(1).collect();
    let got = restore.join(rel);
    fn cmp(a: &Path, b: &Path) -> Result<(), String> {
        let ma = std::fs::symlink_metadata(a).map_err(err("source"))?;
        if ma.is_dir() {
            for e in std::fs::read_dir(a).map_err(err("source"))? {
                let e = e.map_err(err("source"))?;
                cmp(&e.path(), &b.join(e.file_name()))?;
            }
            return Ok(());
        }
        let (x, y) = (
            std::fs::read(a).map_err(err("source"))?,
            std::fs::read(b).map_err(err("restored file"))?,
        );
        if x != y {
            return Err(format!("{} restored wrong", b.display()));
        }
        Ok(())
    }
    cmp(&abs, &got)
}

fn median_row(mut runs: Vec<Row>) -> Row {
    let mid = runs.len() / 2;
    let pick = |runs: &mut Vec<Row>, f: fn(&Row) -> f64| {
        let mut v: Vec<f64> = runs.iter().map(f).collect();
        v.sort_by(|a, b| a.total_cmp(b));
        v[mid]
    };
    let b1 = pick(&mut runs, |r| r.backup1_gbps);
    let b2 = pick(&mut runs, |r| r.backup2_gbps);
    let rs = pick(&mut runs, |r| r.restore_gbps);
    let c1 = pick(&mut runs, |r| r.cpu_s_per_gb_backup1);
    let c2 = pick(&mut runs, |r| r.cpu_s_per_gb_backup2);
    let mut row = runs.swap_remove(0);
    row.backup1_gbps = b1;
    row.backup2_gbps = b2;
    row.restore_gbps = rs;
    row.cpu_s_per_gb_backup1 = c1;
    row.cpu_s_per_gb_backup2 = c2;
    row
}

pub fn run(mut args: CasArgs) -> Result<(), String> {
    let s3 = args.repo.is_some();
    let defaults = |v: &mut Vec<String>, all: &[&str], s3_one: &str| {
        if v.is_empty() {
            *v = if s3 {
                vec![s3_one.to_string()]
            } else {
                all.iter().map(|s| s.to_string()).collect()
            };
        }
    };
    defaults(&mut args.workloads, &workload::WORKLOADS, "single");
    defaults(&mut args.chunkers, &["cdc", "fixed"], "cdc");
    let size_text = args
        .size
        .clone()
        .unwrap_or_else(|| if s3 { "64M" } else { "1G" }.into());
    let size = parse_nonzero_size(&size_text, "--size")? as u64;
    let repeat = args.repeat.unwrap_or(if s3 { 3 } else { 1 }).max(1);
    for w in &args.workloads {
        if !workload::WORKLOADS.contains(&w.as_str()) {
            return Err(format!(
                "unknown workload {w} ({})",
                workload::WORKLOADS.join(", ")
            ));
        }
    }
    for c in &args.chunkers {
        chunker(c)?;
    }
    for b in &args.backends {
        if !["cpu", "auto", "oracle", "service"].contains(&b.as_str()) {
            return Err(format!("unknown backend {b} (cpu, auto, oracle, service)"));
        }
    }
    let data_root = args.data_dir.clone().unwrap_or_else(memory_dir);
    let data = data_root.join(format!("gvault-bench-data-{}", std::process::id()));
    let repo_roots = if args.repo_dir.is_empty() {
        vec![memory_dir()]
    } else {
        args.repo_dir.clone()
    };
    if let Some(url) = &args.repo {
        let r = s3::run(
            &s3::S3Bench {
                url,
                endpoint: args.s3_endpoint.clone(),
                connections: &args.s3_connections,
                workloads: &args.workloads,
                chunkers: &args.chunkers,
                size,
                repeat,
                data: &data,
                local_root: &repo_roots[0],
            },
            args.json,
            args.save.as_ref(),
        );
        let _ = std::fs::remove_dir_all(&data);
        return r;
    }
    let gpu = gvault_accel::GpuBackend::probe()
        .ok()
        .and_then(|g| g.devices().first().map(|d| d.name.clone()));
    let mut bounds = Vec::new();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    for r in &repo_roots {
        bounds.push(Bound {
            repo_fs: r.display().to_string(),
            write_gbps: write_rate(r, size.min(4 << 30))?,
            write_all_gbps: files_write_rate(r, cores, size.min(4 << 30))?,
            // Only a bound: a file system that cannot map a file still
            // takes the benchmark (restores write it with pwrite).
            one_file_gbps: one_file_rate(r, size.min(4 << 30))
                .map_err(|e| eprintln!("gvault: {e}"))
                .ok(),
        });
    }
    workload::create("single", &data, size.min(4 << 30)).map_err(err("creating data"))?;
    let read_gbps = read_rate(&data);
    let read_all_gbps = read_rate_parallel(&data);
    let mut rows = Vec::new();
    let result = (|| {
        for w in &args.workloads {
            for root in &repo_roots {
                for c in &args.chunkers {
                    for b in &args.backends {
                        let mut runs = Vec::new();
                        for _ in 0..repeat {
                            let m =
                                one_run(w, &data, root, &root.display().to_string(), c, b, size)?;
                            runs.push(m.row);
                        }
                        let row = median_row(runs);
                        if !args.json {
                            print_row(&row, rows.is_empty());
                        }
                        rows.push(row);
                    }
                }
            }
        }
        Ok::<(), String>(())
    })();
    let _ = std::fs::remove_dir_all(&data);
    result?;
    let report = Report {
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        gpu,
        size,
        read_gbps,
        read_all_gbps,
        bounds,
        rows,
    };
    let json = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
    if args.json {
        println!("{json}");
    } else {
        println!(
            "bounds: page-cache read {:.2} GB/s (one reader), {:.2} (every core); \
             write, one writer / every core / every core into one file: {}",
            report.read_gbps,
            report.read_all_gbps,
            report
                .bounds
                .iter()
                .map(|b| {
                    let one = b.one_file_gbps.map_or("-".into(), |g| format!("{g:.2}"));
                    format!(
                        "{} {:.2} / {:.2} / {one} GB/s",
                        b.repo_fs, b.write_gbps, b.write_all_gbps
                    )
                })
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    if let Some(p) = &args.save {
        std::fs::write(p, &json).map_err(err("writing the report"))?;
    }
    if let Some(p) = &args.plot {
        plot::draw(&report.rows, p)?;
        if !args.json {
            println!("figure written to {}", p.display());
        }
    }
    Ok(())
}

fn print_row(r: &Row, header: bool) {
    if header {
        println!(
            "{:<11} {:<10} {:<6} {:<7} {:>9} {:>9} {:>9} {:>7} {:>9} {:>7} {:>9}",
            "workload",
            "repo",
            "chunk",
            "backend",
            "backup1",
            "backup2",
            "restore",
            "new v2",
            "added v2",
            "stored",
            "cpu s/GB"
        );
    }
    let mut notes = match (r.oracle_served, r.oracle_missed) {
        (Some(s), Some(m)) => format!("  (oracle served {s} jobs, missed {m})"),
        _ => String::new(),
    };
    if let Some([a, b, c]) = r.gpu_share {
        notes += &format!(
            "  (on the GPU: {:.0}% / {:.0}% / {:.0}% of the bytes)",
            a * 100.0,
            b * 100.0,
            c * 100.0
        );
    }
    println!(
        "{:<11} {:<10} {:<6} {:<7} {:>9} {:>9} {:>9} {:>6.1}% {:>9} {:>7.3} {:>4.2}/{:<4.2}{notes}",
        r.workload,
        short_fs(&r.repo_fs),
        r.chunker,
        r.backend,
        format!("{:.2} GB/s", r.backup1_gbps),
        format!("{:.2} GB/s", r.backup2_gbps),
        format!("{:.2} GB/s", r.restore_gbps),
        r.new_share_v2 * 100.0,
        crate::repo_cmd::human(r.added_v2),
        r.stored_ratio,
        r.cpu_s_per_gb_backup1,
        r.cpu_s_per_gb_backup2,
    );
}

fn short_fs(p: &str) -> String {
    if p.len() <= 10 {
        p.to_string()
    } else {
        format!("…{}", &p[p.len() - 9..])
    }
}
