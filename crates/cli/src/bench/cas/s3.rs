//! `gvault bench cas --repo s3://BUCKET/PREFIX`: backup and restore of the
//! same data into a local directory and into an S3 repository, the latter
//! with each `--s3-connections` count; medians of `--repeat` runs, and the
//! S3 figures as ratios of the local directory's.
//!
//! Each run backs version 1 of the workload up into a new repository (a
//! fresh prefix under the given one, deleted afterwards), then restores it
//! into a new directory and checks it byte for byte. Beside GB/s: the
//! process's CPU seconds per GB (what the client costs) and how busy the
//! whole machine was (/proc/stat), which shows when a server on the same
//! machine shares, and bounds, the cores.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use gvault_cas::{Backend, InitOptions, Kind, Repository, S3Backend, S3Options};
use gvault_store::Encryption;
use serde::Serialize;

use super::{chunker, cpu_seconds, verify, workload};
use crate::bench::measure::{err, gbps, median};

/// The settings of an S3 sweep.
pub struct S3Bench<'a> {
    pub url: &'a str,
    pub endpoint: Option<String>,
    pub connections: &'a [usize],
    pub workloads: &'a [String],
    pub chunkers: &'a [String],
    pub size: u64,
    pub repeat: usize,
    pub data: &'a Path,
    pub local_root: &'a Path,
}

#[derive(Serialize, Clone, Debug)]
pub struct S3Row {
    workload: String,
    chunker: String,
    /// `local` (a directory) or `s3`.
    repo: String,
    /// Requests in flight at most (S3 rows).
    connections: Option<usize>,
    bytes: u64,
    backup_gbps: f64,
    restore_gbps: f64,
    /// Over the local directory's figure of the same workload.
    backup_ratio: f64,
    restore_ratio: f64,
    cpu_s_per_gb_backup: f64,
    cpu_s_per_gb_restore: f64,
    /// Share of all cores busy (any process) during the backup / restore.
    machine_busy_backup: f64,
    machine_busy_restore: f64,
}

#[derive(Serialize)]
struct S3Report {
    cpus: usize,
    url: String,
    endpoint: String,
    size: u64,
    repeat: usize,
    rows: Vec<S3Row>,
}

/// Busy and total jiffies of all cores since boot (`None` off Linux).
fn cpu_jiffies() -> Option<(u64, u64)> {
    let s = std::fs::read_to_string("/proc/stat").ok()?;
    let line = s.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    let total: u64 = v.iter().take(8).sum();
    // idle and iowait are not busy.
    let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
    Some((total - idle, total))
}

/// Times `f`; returns its result, the seconds, CPU seconds of this process
/// and the machine's busy share meanwhile.
fn timed<T>(
    f: impl FnOnce() -> Result<T, String>,
) -> Result<(T, std::time::Duration, f64, f64), String> {
    let (j0, c0, t) = (cpu_jiffies(), cpu_seconds(), Instant::now());
    let r = f()?;
    let el = t.elapsed();
    let cpu = cpu_seconds() - c0;
    let busy = match (j0, cpu_jiffies()) {
        (Some((b0, t0)), Some((b1, t1))) if t1 > t0 => (b1 - b0) as f64 / (t1 - t0) as f64,
        _ => 0.0,
    };
    Ok((r, el, cpu, busy))
}

/// Removes every object of the scratch repository at `url`.
fn remove_s3(url: &str, opts: &S3Options) -> Result<(), String> {
    let b = S3Backend::connect(url, opts).map_err(err("connecting"))?;
    for k in Kind::ALL {
        for n in b.list(k).map_err(err("listing"))? {
            b.delete(k, &n).map_err(err("deleting"))?;
        }
    }
    for n in [gvault_cas::repo::KEYS_OBJECT, gvault_cas::repo::CONFIG_NAME] {
        b.delete_root(n).map_err(err("deleting"))?;
    }
    Ok(())
}

/// One backup + restore of the data into a new repository: local when
/// `conns` is `None`, else S3 with that many connections.
fn one_run(
    b: &S3Bench<'_>,
    w: &str,
    c: &str,
    conns: Option<usize>,
    n: usize,
) -> Result<S3Row, String> {
    let enc = Encryption::with_key(gvault_store::keys::generate_key());
    let opts = InitOptions {
        chunker: chunker(c)?,
        compression: true,
    };
    let accel = gvault_cas::accel_jobs::cpu_backend();
    let tag = format!("gvault-bench-{}-{n}", std::process::id());
    let restore_dir = b.local_root.join(format!("{tag}-restore"));
    let local_dir = b.local_root.join(format!("{tag}-repo"));
    let s3_url = format!("{}/{tag}", b.url.trim_end_matches('/'));
    let s3_opts = S3Options {
        endpoint: b.endpoint.clone(),
        connections: conns.unwrap_or(1),
        ..S3Options::default()
    };
    let _ = std::fs::remove_dir_all(&restore_dir);
    let _ = std::fs::remove_dir_all(&local_dir);
    let result = (|| {
        let repo = match conns {
            None => Repository::init(&local_dir, &enc, opts, accel).map_err(err("init"))?,
            Some(_) => {
                let be: Arc<dyn Backend> =
                    Arc::new(S3Backend::connect(&s3_url, &s3_opts).map_err(err("connecting"))?);
                Repository::init_on(be, &s3_url, &enc, opts, accel).map_err(err("init"))?
            }
        };
        let quiet = &mut |_: gvault_cas::Progress| {};
        let (s, tb, cb, bb) = timed(|| {
            gvault_cas::backup(&repo, &[b.data.to_owned()], quiet).map_err(err("backup"))
        })?;
        let snap = gvault_cas::Snapshot::read(&repo, &s.snapshot).map_err(err("snapshot"))?;
        let (r, tr, cr, br) = timed(|| {
            gvault_cas::restore(&repo, &snap, &restore_dir, None, &|_, _| {})
                .map_err(err("restore"))
        })?;
        if !r.failed.is_empty() {
            return Err(format!("restore failed for {:?}", r.failed));
        }
        verify(b.data, &restore_dir)?;
        let gb = s.bytes_total as f64 / 1e9;
        Ok(S3Row {
            workload: w.into(),
            chunker: c.into(),
            repo: if conns.is_some() { "s3" } else { "local" }.into(),
            connections: conns,
            bytes: s.bytes_total,
            backup_gbps: gbps(s.bytes_total, tb),
            restore_gbps: gbps(r.bytes, tr),
            backup_ratio: 1.0,
            restore_ratio: 1.0,
            cpu_s_per_gb_backup: cb / gb.max(1e-9),
            cpu_s_per_gb_restore: cr / gb.max(1e-9),
            machine_busy_backup: bb,
            machine_busy_restore: br,
        })
    })();
    let _ = std::fs::remove_dir_all(&restore_dir);
    let _ = std::fs::remove_dir_all(&local_dir);
    let cleaned = match conns {
        Some(_) => remove_s3(&s3_url, &s3_opts),
        None => Ok(()),
    };
    let row = result?;
    cleaned?;
    Ok(row)
}

fn median_row(runs: Vec<S3Row>) -> S3Row {
    let pick = |f: fn(&S3Row) -> f64| median(runs.iter().map(f).collect());
    let mut row = runs[0].clone();
    row.backup_gbps = pick(|r| r.backup_gbps);
    row.restore_gbps = pick(|r| r.restore_gbps);
    row.cpu_s_per_gb_backup = pick(|r| r.cpu_s_per_gb_backup);
    row.cpu_s_per_gb_restore = pick(|r| r.cpu_s_per_gb_restore);
    row.machine_busy_backup = pick(|r| r.machine_busy_backup);
    row.machine_busy_restore = pick(|r| r.machine_busy_restore);
    row
}

pub fn run(b: &S3Bench<'_>, json: bool, save: Option<&PathBuf>) -> Result<(), String> {
    gvault_cas::backend_s3::parse_s3_url(b.url).map_err(|e| e.to_string())?;
    if b.connections.is_empty() || b.connections.iter().any(|&c| c == 0 || c > 256) {
        return Err("--s3-connections: counts must be 1..=256".into());
    }
    // Fails early, clearly, on a missing bucket or refused credentials.
    let probe = S3Options {
        endpoint: b.endpoint.clone(),
        ..S3Options::default()
    };
    S3Backend::connect(b.url, &probe).map_err(err("connecting"))?;
    let endpoint = b
        .endpoint
        .clone()
        .or_else(|| std::env::var("AWS_ENDPOINT_URL").ok())
        .unwrap_or_else(|| "AWS S3".into());
    let mut rows = Vec::new();
    let mut n = 0;
    for w in b.workloads {
        for c in b.chunkers {
            workload::create(w, b.data, b.size).map_err(err("creating data"))?;
            let mut local = None;
            for conns in std::iter::once(None).chain(b.connections.iter().map(|&c| Some(c))) {
                let mut runs = Vec::new();
                for _ in 0..b.repeat.max(1) {
                    n += 1;
                    runs.push(one_run(b, w, c, conns, n)?);
                }
                let mut row = median_row(runs);
                let base: &S3Row = local.get_or_insert_with(|| row.clone());
                row.backup_ratio = row.backup_gbps / base.backup_gbps.max(1e-12);
                row.restore_ratio = row.restore_gbps / base.restore_gbps.max(1e-12);
                if !json {
                    print_row(&row, rows.is_empty());
                }
                rows.push(row);
            }
        }
    }
    let report = S3Report {
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        url: b.url.to_string(),
        endpoint,
        size: b.size,
        repeat: b.repeat.max(1),
        rows,
    };
    let text = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
    if json {
        println!("{text}");
    } else {
        println!(
            "medians of {} runs; {} cores; ratios are S3 over the local directory; busy: share of all cores in use (the server's too, if it runs here)",
            report.repeat, report.cpus
        );
    }
    if let Some(p) = save {
        std::fs::write(p, &text).map_err(err("writing the report"))?;
    }
    Ok(())
}

fn print_row(r: &S3Row, header: bool) {
    if header {
        println!(
            "{:<10} {:<5} {:<9} {:>10} {:>6} {:>5} {:>8} {:>10} {:>6} {:>5} {:>8}",
            "workload",
            "chunk",
            "repo",
            "backup",
            "×local",
            "busy",
            "cpu s/GB",
            "restore",
            "×local",
            "busy",
            "cpu s/GB"
        );
    }
    let repo = match r.connections {
        Some(c) => format!("s3 ×{c}"),
        None => "local dir".into(),
    };
    println!(
        "{:<10} {:<5} {:<9} {:>10} {:>6.2} {:>4.0}% {:>8.2} {:>10} {:>6.2} {:>4.0}% {:>8.2}",
        r.workload,
        r.chunker,
        repo,
        format!("{:.3} GB/s", r.backup_gbps),
        r.backup_ratio,
        r.machine_busy_backup * 100.0,
        r.cpu_s_per_gb_backup,
        format!("{:.3} GB/s", r.restore_gbps),
        r.restore_ratio,
        r.machine_busy_restore * 100.0,
        r.cpu_s_per_gb_restore,
    );
}
