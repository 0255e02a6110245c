//! `gvault bench lsm`: the store's LSM engine under LevelDB db_bench's
//! workloads (fillseq, fillrandom, overwrite, readrandom, readseq,
//! readwhilewriting; 16-byte keys) and seed 000 §4.5's insert, search and
//! remove of random 64-bit keys with objects of 512-byte blocks. Reports
//! ops/s, MB/s and write amplification (bytes the process wrote to files
//! over bytes the user wrote). readrandom and readseq run on `--threads`
//! threads (a sweep) against a cached, fully compacted store, with their
//! scaling over one thread and the store's space amplification;
//! `--profile` says where the workers' time went. `--encrypt` runs each
//! workload unencrypted and/or with AES-256-GCM on the CPU, GPU or auto
//! backend; `--reencrypt` times the re-encryption pass after a key
//! rotation against a disk copy.

mod data;
mod encrypt;
mod reads;
mod reencrypt;
mod workloads;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

use super::measure::{parse_size, size_label};
use encrypt::{Backends, Encrypt, PlainRates};
use workloads::{run_case, Case, Outcome, Workload};

/// Seed 000's object unit.
const BLOCK: usize = 512;
/// Most worker threads a run may ask for.
const MAX_THREADS: usize = 1024;

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncMode {
    Off,
    On,
    Both,
}

#[derive(clap::Args, Debug)]
pub struct LsmArgs {
    /// Small sizes for CI: the whole run takes seconds.
    #[arg(long)]
    quick: bool,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Workloads (comma separated) [default: all]: fillseq, fillrandom,
    /// overwrite, readrandom, readseq, readwhilewriting, seed000-insert,
    /// seed000-search, seed000-remove.
    #[arg(long, value_delimiter = ',')]
    workloads: Option<Vec<String>>,
    /// Only seed 000 §4.5's workloads (insert, search, remove).
    #[arg(long = "seed-000", conflicts_with = "workloads")]
    seed_000: bool,
    /// db_bench value sizes (comma separated) [default: 100,4K,64K,1M].
    #[arg(long, value_delimiter = ',')]
    value_sizes: Option<Vec<String>>,
    /// Entries per db_bench workload [default: 1M or ~1 GiB of key+value,
    /// whichever is fewer (--max-bytes)].
    #[arg(long)]
    num: Option<u64>,
    /// Timed gets of readrandom (db_bench --reads), shared by its threads
    /// [default: --num]: longer runs of large values without a larger store.
    #[arg(long)]
    reads: Option<u64>,
    /// Seed 000 keys per workload [default: 256Ki, or fewer to stay within
    /// --max-bytes].
    #[arg(long)]
    seed_keys: Option<u64>,
    /// Seed 000 object sizes in 512-byte blocks (comma separated).
    #[arg(long, value_delimiter = ',', default_value = "1,16,128,512")]
    objects: Vec<usize>,
    /// Cap on the bytes a workload writes when its count is a default
    /// [default: 1G; --quick: 4M].
    #[arg(long)]
    max_bytes: Option<String>,
    /// Sync every put (db_bench --sync): off, on, or both.
    #[arg(long, value_enum, default_value = "both")]
    sync: SyncMode,
    /// Where the stores are created (a fresh subdirectory, removed
    /// afterwards) [default: the system temp dir]. Use a real disk.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Worker threads, one count or a sweep (comma separated, e.g.
    /// 1,2,4,8,16), of readrandom and readseq [default: 1] and the readers
    /// of readwhilewriting [default: 4]. readrandom's threads split the
    /// gets, readseq's each scan a contiguous share of the keys; their rows
    /// get `scaling`, ops/s over the 1-thread row of the same workload,
    /// size and mode.
    #[arg(long, value_delimiter = ',', value_name = "N[,N...]")]
    threads: Option<Vec<usize>>,
    /// readrandom and readseq: every thread reads for this many seconds
    /// (readseq scans its range again and again) instead of sharing
    /// --reads or --num operations, so each thread count runs as long.
    #[arg(long, value_name = "SECS", conflicts_with = "reads")]
    duration: Option<f64>,
    /// Block cache of every store in MiB [default: the store's own; for
    /// readrandom and readseq about twice what their tables' blocks take
    /// decoded, at least 64 MiB, so that the data stays cached].
    #[arg(long, value_name = "MIB")]
    cache_mb: Option<u64>,
    /// Memtable of every store in MiB [default: the store's own].
    #[arg(long, value_name = "MIB")]
    memtable_mb: Option<u64>,
    /// Also write the JSON report to this file (the table still prints).
    #[arg(long, value_name = "FILE.json")]
    save: Option<PathBuf>,
    /// Say where the workers' time went, per op and summed over the worker
    /// threads: wall, blocked (wall - on a CPU - queued for one: locks,
    /// waits, I/O), CPU of the process's other threads (flushes,
    /// compactions, read-ahead, a writer) and context switches.
    #[arg(long)]
    profile: bool,
    /// Timed runs per workload (each in a fresh store; readrandom and
    /// readseq: one per value size and mode, shared by their thread
    /// counts); the median is reported.
    #[arg(long, default_value_t = 1)]
    repeat: usize,
    /// Encryption modes (comma separated): none, cpu, gpu, auto, their
    /// index-only twins cpu-index, gpu-index, auto-index (tables and
    /// manifest sealed, value log under CRC32C: seed 000's "without log
    /// encryption"), and none-again (plain once more, an A/A check of the
    /// host). Each workload runs once per mode; with none and another mode,
    /// rows get an enc/plain throughput ratio.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "none")]
    encrypt: Vec<Encrypt>,
    /// Also build a store of this many GiB under one data key, rotate the
    /// key and time the re-encryption pass against a sequential copy
    /// (read + write + fsync) of as many bytes in the same directory. Alone
    /// (without --workloads or --seed-000) it runs only this.
    #[arg(long, value_name = "GIB")]
    reencrypt: Option<f64>,
    /// Pipelined read-ahead of encrypted iteration (readseq): auto (the
    /// store's default: on with at least 2 cores), on or off.
    #[arg(long, value_enum, default_value = "auto")]
    read_ahead: ReadAhead,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadAhead {
    Auto,
    On,
    Off,
}

#[derive(Serialize)]
struct Row {
    group: &'static str,
    workload: &'static str,
    /// Encryption mode: none, cpu, gpu or auto.
    encrypt: &'static str,
    value_bytes: usize,
    /// None: the workload writes nothing while timed.
    sync: Option<bool>,
    num: u64,
    /// Worker threads (readrandom, readseq, readwhilewriting's readers).
    threads: Option<usize>,
    runs: usize,
    ops: u64,
    seconds: f64,
    ops_per_sec: f64,
    /// ops/s over the 1-thread row of the same workload, size, sync, mode
    /// and count (None: no such row ran).
    scaling: Option<f64>,
    /// Written key+value bytes per second for writers; returned bytes per
    /// second for readers (readwhilewriting: its readers). MB = 10^6 bytes.
    mb_per_sec: f64,
    user_bytes_written: u64,
    process_bytes_written: Option<u64>,
    write_amp: Option<f64>,
    writer_ops_per_sec: Option<f64>,
    /// The working threads' microseconds per op on a CPU, and queued for
    /// one, summed over them (the timing thread of a single-threaded
    /// workload; the readers of a threaded one).
    thread_cpu_us_per_op: Option<f64>,
    thread_queued_us_per_op: Option<f64>,
    /// The stores' block cache budget (None: the store's default).
    cache_bytes: Option<usize>,
    /// With --profile: where the workers' time went.
    profile: Option<Profile>,
    /// ops/s over the unencrypted run of the same workload, size and sync
    /// (the ratio of the two medians).
    enc_vs_plain: Option<f64>,
    /// The same ratio repeat by repeat (modes run back to back in each):
    /// median, least and greatest.
    enc_vs_plain_paired: Option<encrypt::Paired>,
}

/// Microseconds per op, summed over the worker threads, and context
/// switches per op.
#[derive(Serialize, Clone, Copy, Debug, PartialEq)]
struct Profile {
    /// Each worker's wall time from its start to its end, summed.
    wall_us_per_op: f64,
    /// Wall time neither on a CPU nor queued for one: asleep on a lock, a
    /// condition variable, I/O (thread_cpu + thread_queued + blocked = wall).
    blocked_us_per_op: Option<f64>,
    /// CPU time of the process's other threads over the timed part:
    /// flushes, compactions, read-ahead workers, readwhilewriting's writer.
    other_threads_cpu_us_per_op: Option<f64>,
    /// The workers' voluntary context switches (each one a block).
    voluntary_switches_per_op: Option<f64>,
    /// The workers' involuntary ones (preempted).
    involuntary_switches_per_op: Option<f64>,
}

/// One value size and mode of readrandom/readseq: the store after the fill
/// and the full compaction (the median run by space_amp).
#[derive(Serialize)]
struct SpaceRow {
    encrypt: &'static str,
    value_bytes: usize,
    num: u64,
    runs: usize,
    /// Key + value bytes of the live entries (each key once).
    live_bytes: u64,
    /// Bytes of every file in the store's directory: tables (*.sst), value
    /// log (*.vlog) and the rest (manifest, CURRENT, lock, key files).
    disk_bytes: u64,
    disk_table_bytes: u64,
    disk_vlog_bytes: u64,
    disk_other_bytes: u64,
    /// Of those, the tables and value-log bytes the store's current
    /// version holds; files beyond these are obsolete, awaiting deletion.
    version_table_bytes: u64,
    version_vlog_bytes: u64,
    /// disk_bytes / live_bytes.
    space_amp: f64,
    /// Bytes of the store's files after it was closed and opened again
    /// (obsolete files deleted), before the reads.
    reopened_bytes: u64,
    /// reopened_bytes / live_bytes.
    reopened_space_amp: f64,
    fill_seconds: f64,
    compact_seconds: f64,
    cache_bytes: Option<usize>,
    /// Block cache bytes in use after the warm-up scan of the reopened
    /// store: its live tables' blocks, decoded.
    cache_used_bytes: usize,
}

#[derive(Serialize)]
struct Machine {
    cores: usize,
    dir: String,
    filesystem: Option<String>,
    device: Option<String>,
    in_memory_filesystem: bool,
}

#[derive(Serialize)]
struct Report {
    machine: Machine,
    runs_per_workload: usize,
    notes: Vec<String>,
    rows: Vec<Row>,
    space: Vec<SpaceRow>,
    reencrypt: Option<reencrypt::ReencryptRow>,
}

struct Plan {
    cases: Vec<Case>,
    notes: Vec<String>,
}

pub fn run(args: LsmArgs) -> Result<(), String> {
    let plan = plan(&args)?;
    if let Some(path) = &args.save {
        // A report that cannot be written fails now, not after the run.
        std::fs::File::create(path).map_err(|e| format!("--save {}: {e}", path.display()))?;
    }
    let mut modes = args.encrypt.clone();
    // Re-encryption is timed on a fully sealed store (an index-only one
    // would skip its value log).
    if args.reencrypt.is_some() && !modes.iter().any(|m| m.seals_value_log()) {
        modes.push(Encrypt::Cpu);
    }
    let mut backends = Backends::new(&modes)?;
    backends.memtable_bytes = match args.memtable_mb {
        Some(mb) if (1..=1 << 20).contains(&mb) => Some((mb as usize) << 20),
        Some(mb) => return Err(format!("--memtable-mb {mb}: 1 to 1048576 MiB")),
        None => None,
    };
    backends.read_ahead = match args.read_ahead {
        ReadAhead::Auto => None,
        ReadAhead::On => Some(true),
        ReadAhead::Off => Some(false),
    };
    let base = match &args.dir {
        Some(d) => {
            std::fs::create_dir_all(d).map_err(|e| format!("creating {}: {e}", d.display()))?;
            tempfile::Builder::new()
                .prefix("gvault-bench-lsm-")
                .tempdir_in(d)
        }
        None => tempfile::Builder::new()
            .prefix("gvault-bench-lsm-")
            .tempdir(),
    }
    .map_err(|e| format!("creating the benchmark directory: {e}"))?;
    let fs = data::filesystem_of(base.path());
    let in_memory = fs
        .as_ref()
        .is_some_and(|(t, _)| matches!(t.as_str(), "tmpfs" | "ramfs"));
    let machine = Machine {
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        dir: base.path().display().to_string(),
        filesystem: fs.as_ref().map(|f| f.0.clone()),
        device: fs.as_ref().map(|f| f.1.clone()),
        in_memory_filesystem: in_memory,
    };
    let mut notes = plan.notes;
    if in_memory {
        notes.push(format!(
            "{} is on {}: fsync costs nothing and nothing reaches a disk; pass --dir on a real disk",
            machine.dir,
            machine.filesystem.as_deref().unwrap_or("?")
        ));
    }
    if !args.json {
        println!(
            "{} cores; stores in {} ({}); {}",
            machine.cores,
            machine.dir,
            fs.as_ref()
                .map_or("filesystem unknown".into(), |(t, d)| format!("{t} on {d}")),
            if args.repeat == 1 {
                "one timed run per workload (--repeat N for the median of N)".to_string()
            } else {
                format!(
                    "median of {} timed runs per workload, encryption modes taking turns",
                    args.repeat
                )
            }
        );
        for n in &notes {
            println!("note: {n}");
        }
        if !plan.cases.is_empty() {
            print_header(args.profile);
        }
    }
    let mut rows = Vec::new();
    let mut space = Vec::new();
    let mut plain = PlainRates::default();
    let mut one_thread = OneThreadRates::default();
    for unit in units(&plan.cases) {
        let unit: Vec<&Case> = unit.into_iter().map(|j| &plan.cases[j]).collect();
        let lead = unit[0];
        let (runs, unit_space) = if lead.workload.is_scaling() {
            run_reads(base.path(), &unit, args.repeat, &backends)?
        } else {
            (
                run_cell(base.path(), &unit, args.repeat, &backends)?,
                Vec::new(),
            )
        };
        for row in finish_rows(&unit, runs, args.profile, &mut plain, &mut one_thread) {
            if !args.json {
                print_row(&row, args.profile);
            }
            rows.push(row);
        }
        for s in unit_space {
            if !args.json {
                print_space(&s);
            }
            space.push(s);
        }
    }
    if !args.json {
        if let Some(line) = encrypt::target_summary(&target_cells(&rows)) {
            println!("{line}");
        }
    }
    let reencrypt = match args.reencrypt {
        Some(gib) => {
            let mode = modes
                .iter()
                .copied()
                .find(|m| m.seals_value_log())
                .unwrap_or(Encrypt::Cpu);
            let r = reencrypt::run(base.path(), gib, mode, &backends)
                .map_err(|e| format!("reencrypt: {e}"))?;
            if !args.json {
                println!(
                    "reencrypt ({}): {:.1} MB store, {:.1} MB/s re-encrypting ({:.2} s; {} tables, {} value-log files), sequential copy {:.1} MB/s: ratio {:.2}",
                    r.encrypt,
                    r.store_bytes as f64 / 1e6,
                    r.reencrypt_mb_per_sec,
                    r.reencrypt_seconds,
                    r.tables_rewritten,
                    r.logs_rewritten,
                    r.copy_mb_per_sec,
                    r.ratio_to_copy
                );
            }
            Some(r)
        }
        None => None,
    };
    if args.json || args.save.is_some() {
        let report = Report {
            machine,
            runs_per_workload: args.repeat,
            notes,
            rows,
            space,
            reencrypt,
        };
        let text = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
        if let Some(path) = &args.save {
            std::fs::write(path, &text).map_err(|e| format!("--save {}: {e}", path.display()))?;
        }
        if args.json {
            println!("{text}");
        }
    }
    base.close()
        .map_err(|e| format!("removing the benchmark directory: {e}"))
}

/// The plan's cases in units that run together, in order of first case:
/// readrandom/readseq cases that share stores (every workload, thread
/// count and mode of one value size), else the modes of one cell.
fn units(cases: &[Case]) -> Vec<Vec<usize>> {
    let mut done = vec![false; cases.len()];
    let mut units = Vec::new();
    for i in 0..cases.len() {
        if done[i] {
            continue;
        }
        let lead = &cases[i];
        let unit: Vec<usize> = if lead.workload.is_scaling() {
            (i..cases.len())
                .filter(|&j| !done[j] && cases[j].same_store(lead))
                .collect()
        } else {
            (i..cases.len())
                .take_while(|&j| cases[j].same_cell(lead))
                .collect()
        };
        for &j in &unit {
            done[j] = true;
        }
        units.push(unit);
    }
    units
}

/// Runs the modes of one cell `repeat` times, taking turns: (none, cpu,
/// auto), then (cpu, auto, none), ..., so that host noise (other tenants,
/// frequency, page cache) hits every mode alike. Runs per case, in order.
fn run_cell(
    base: &Path,
    cases: &[&Case],
    repeat: usize,
    backends: &Backends,
) -> Result<Vec<Vec<Outcome>>, String> {
    let mut runs: Vec<Vec<Outcome>> = cases.iter().map(|_| Vec::with_capacity(repeat)).collect();
    for r in 0..repeat {
        // Each repeat starts with the next mode, so no mode always runs
        // right after the same other one (what a run leaves behind, in the
        // page cache, the allocator and the CPU pool, then lands on every
        // mode alike).
        let k = cases.len();
        for i in (0..k).map(|i| (i + r) % k) {
            let case = cases[i];
            runs[i].push(run_case(base, case, r, backends).map_err(|e| {
                format!(
                    "{} ({} bytes, encrypt {}): {e}",
                    case.workload.name(),
                    case.value_bytes,
                    case.encrypt.name()
                )
            })?);
        }
    }
    Ok(runs)
}

/// Runs readrandom/readseq cases that share stores (`Case::same_store`):
/// per repeat, one store per mode (modes taking turns as in `run_cell`),
/// each serving its mode's cases in order. Runs per case, and the space
/// row of each mode.
fn run_reads(
    base: &Path,
    cases: &[&Case],
    repeat: usize,
    backends: &Backends,
) -> Result<(Vec<Vec<Outcome>>, Vec<SpaceRow>), String> {
    let mut modes: Vec<Encrypt> = Vec::new();
    for c in cases {
        if !modes.contains(&c.encrypt) {
            modes.push(c.encrypt);
        }
    }
    let mut runs: Vec<Vec<Outcome>> = cases.iter().map(|_| Vec::with_capacity(repeat)).collect();
    let mut spaces: Vec<Vec<reads::Space>> = modes.iter().map(|_| Vec::new()).collect();
    for r in 0..repeat {
        let k = modes.len();
        for m in (0..k).map(|m| (m + r) % k) {
            let of_mode: Vec<usize> = (0..cases.len())
                .filter(|&i| cases[i].encrypt == modes[m])
                .collect();
            let these: Vec<&Case> = of_mode.iter().map(|&i| cases[i]).collect();
            let (s, outcomes) = reads::run(base, &these, r, backends).map_err(|e| {
                format!(
                    "readrandom/readseq ({} bytes, encrypt {}): {e}",
                    these[0].value_bytes,
                    modes[m].name()
                )
            })?;
            spaces[m].push(s);
            for (i, o) in of_mode.into_iter().zip(outcomes) {
                runs[i].push(o);
            }
        }
    }
    let first = cases[0];
    let rows = modes
        .iter()
        .zip(spaces)
        .map(|(&mode, runs)| space_row(mode, first, runs))
        .collect();
    Ok((runs, rows))
}

/// The median run by space amplification.
fn space_row(mode: Encrypt, case: &Case, mut runs: Vec<reads::Space>) -> SpaceRow {
    let amp = |s: &reads::Space| s.files.total() as f64 / s.live_bytes.max(1) as f64;
    runs.sort_by(|a, b| amp(a).total_cmp(&amp(b)));
    let n = runs.len();
    let m = runs.swap_remove(n / 2);
    SpaceRow {
        encrypt: mode.name(),
        value_bytes: case.value_bytes,
        num: case.num,
        runs: n,
        live_bytes: m.live_bytes,
        disk_bytes: m.files.total(),
        disk_table_bytes: m.files.tables,
        disk_vlog_bytes: m.files.vlog,
        disk_other_bytes: m.files.other,
        version_table_bytes: m.version_table_bytes,
        version_vlog_bytes: m.version_vlog_bytes,
        reopened_bytes: m.reopened_bytes,
        reopened_space_amp: m.reopened_bytes as f64 / m.live_bytes.max(1) as f64,
        space_amp: amp(&m),
        fill_seconds: m.fill_secs,
        compact_seconds: m.compact_secs,
        cache_bytes: case.cache_bytes,
        cache_used_bytes: m.cache_used_bytes,
    }
}

/// ops/s of each 1-thread row, by (workload, value size, sync, mode,
/// count), for the `scaling` of the rows with more threads.
#[derive(Default)]
struct OneThreadRates(HashMap<(&'static str, usize, Option<bool>, &'static str, u64), f64>);

impl OneThreadRates {
    /// Records a 1-thread row; returns a threaded row's ops/s over its
    /// 1-thread row (1.0 for that row itself), None if that did not run.
    fn scaling(&mut self, r: &Row) -> Option<f64> {
        let threads = r.threads?;
        let key = (r.workload, r.value_bytes, r.sync, r.encrypt, r.num);
        if threads == 1 {
            self.0.insert(key, r.ops_per_sec);
        }
        self.0
            .get(&key)
            .filter(|one| **one > 0.0)
            .map(|one| r.ops_per_sec / one)
    }
}

/// The rows of one unit's cases, in order: each the median of its runs,
/// with its ratio to the plain row of its cell (of the medians, and
/// paired repeat by repeat) and its scaling over one thread.
fn finish_rows(
    cases: &[&Case],
    runs: Vec<Vec<Outcome>>,
    profile: bool,
    plain: &mut PlainRates,
    one_thread: &mut OneThreadRates,
) -> Vec<Row> {
    let rates: Vec<Vec<f64>> = runs
        .iter()
        .map(|r| r.iter().map(|o| o.ops as f64 / o.secs.max(1e-9)).collect())
        .collect();
    cases
        .iter()
        .zip(runs)
        .enumerate()
        .map(|(k, (case, case_runs))| {
            let paired = cases
                .iter()
                .position(|p| p.encrypt == Encrypt::None && p.same_cell(case))
                .filter(|_| case.encrypt != Encrypt::None)
                .and_then(|p| encrypt::paired(&rates[p], &rates[k]));
            let mut row = row(case, case_runs, profile);
            row.enc_vs_plain_paired = paired;
            row.enc_vs_plain = plain.ratio(
                case.encrypt,
                (row.workload, row.value_bytes, row.sync, row.threads),
                row.ops_per_sec,
            );
            row.scaling = one_thread.scaling(&row);
            row
        })
        .collect()
}

/// The auto rows with a ratio to plain, each beside its cell's none-again
/// ratio (same workload, size and sync) where that mode ran.
fn target_cells(rows: &[Row]) -> Vec<encrypt::TargetCell> {
    let cell = |r: &Row| (r.workload, r.value_bytes, r.sync, r.threads);
    rows.iter()
        .filter(|r| r.encrypt == Encrypt::Auto.name())
        .filter_map(|r| {
            let control = rows
                .iter()
                .find(|c| c.encrypt == Encrypt::NoneAgain.name() && cell(c) == cell(r))
                .and_then(|c| c.enc_vs_plain);
            let threads = match r.threads {
                Some(t) if t > 1 => format!(" x{t}"),
                _ => String::new(),
            };
            Some(encrypt::TargetCell {
                label: format!("{} {}{threads}", r.workload, size_label(r.value_bytes)),
                value_bytes: r.value_bytes,
                ratio: r.enc_vs_plain?,
                control,
            })
        })
        .collect()
}

fn plan(args: &LsmArgs) -> Result<Plan, String> {
    if args.repeat == 0 {
        return Err("--repeat must be at least 1".into());
    }
    if args.num == Some(0) || args.seed_keys == Some(0) || args.reads == Some(0) {
        return Err("--num, --reads and --seed-keys must be at least 1".into());
    }
    // Ascending, so that each sweep's 1-thread row comes first.
    let threads: Option<Vec<usize>> = match &args.threads {
        Some(t) if t.is_empty() || t.iter().any(|&n| n == 0 || n > MAX_THREADS) => {
            return Err(format!(
                "--threads takes thread counts from 1 to {MAX_THREADS}, e.g. 1,2,4,8,16"
            ))
        }
        Some(t) => {
            let mut t = t.clone();
            t.sort_unstable();
            t.dedup();
            Some(t)
        }
        None => None,
    };
    let duration = match args.duration {
        Some(d) if !(d > 0.0 && d <= 86_400.0) => {
            return Err("--duration is seconds, above 0 (and at most a day)".into())
        }
        d => d.map(Duration::from_secs_f64),
    };
    let cache_bytes = match args.cache_mb {
        Some(mb) => Some(
            usize::try_from(mb)
                .ok()
                .and_then(|mb| mb.checked_mul(1 << 20))
                .ok_or_else(|| format!("--cache-mb {mb} is more than this machine can address"))?,
        ),
        None => None,
    };
    if let Some(g) = args.reencrypt {
        if !(g > 0.0 && g.is_finite()) {
            return Err("--reencrypt is a size in GiB, above 0".into());
        }
    }
    let mut encrypt: Vec<Encrypt> = Vec::new();
    for &m in &args.encrypt {
        if !encrypt.contains(&m) {
            encrypt.push(m);
        }
    }
    encrypt.sort_by_key(|m| *m != Encrypt::None); // plain first, for the ratio
    let only_reencrypt = args.reencrypt.is_some() && args.workloads.is_none() && !args.seed_000;
    let workloads: Vec<Workload> = match (&args.workloads, args.seed_000) {
        (Some(names), _) => names
            .iter()
            .map(|n| {
                Workload::ALL
                    .into_iter()
                    .find(|w| w.name() == n.trim())
                    .ok_or_else(|| {
                        let all: Vec<_> = Workload::ALL.iter().map(|w| w.name()).collect();
                        format!("unknown workload {n:?}; workloads: {}", all.join(", "))
                    })
            })
            .collect::<Result<_, _>>()?,
        (None, true) => Workload::ALL
            .into_iter()
            .filter(|w| w.is_seed000())
            .collect(),
        (None, false) if only_reencrypt => Vec::new(),
        (None, false) => Workload::ALL.to_vec(),
    };
    let value_sizes: Vec<usize> = match &args.value_sizes {
        Some(s) => s.iter().map(|s| parse_size(s)).collect::<Result<_, _>>()?,
        None => vec![100, 4 << 10, 64 << 10, 1 << 20],
    };
    if let Some(v) = value_sizes.iter().find(|&&v| v < data::VALUE_HEADER) {
        return Err(format!(
            "value size {v} is below {} bytes (each value carries a 16-byte check header)",
            data::VALUE_HEADER
        ));
    }
    if args.objects.contains(&0) {
        return Err("--objects sizes are block counts, at least 1".into());
    }
    let max_bytes = match &args.max_bytes {
        Some(s) => parse_size(s)? as u64,
        None if args.quick => 4 << 20,
        None => 1 << 30,
    };
    let (max_entries, seed_default, sync_floor) = if args.quick {
        (2_000, 2_000, 20)
    } else {
        (1_000_000, 256 << 10, 100)
    };
    let syncs: &[bool] = match args.sync {
        SyncMode::Off => &[false],
        SyncMode::On => &[true],
        SyncMode::Both => &[false, true],
    };
    // db_bench's fillsync writes num / 1000 entries.
    let sync_num = |n: u64| (n / 1000).max(n.min(sync_floor));
    let capped = |explicit: Option<u64>, default: u64, entry: usize| {
        explicit.unwrap_or_else(|| default.min(max_bytes / entry as u64).max(1))
    };
    let mut cases = Vec::new();
    let mut notes = vec![
        "MB = 10^6 bytes; write amplification = bytes this process passed to write(2) (/proc/self/io wchar) from the start of the timed part until flushes and compactions settled, over key+value bytes written; us/op cpu+queue = the working threads' microseconds per op on a CPU and runnable but queued (/proc/thread-self/schedstat), summed over them: wall time above both is time they slept (locks, I/O, waiting on other threads); paired enc/plain = each repeat's encrypted ops/s over the plain ops/s of the same repeat (the modes run back to back): median [least, greatest]".into(),
    ];
    let remove_blocks = args.objects.iter().copied().min().unwrap_or(1);
    for &w in &workloads {
        let sizes: Vec<usize> = match w {
            Workload::SeedRemove => vec![remove_blocks * BLOCK],
            _ if w.is_seed000() => args.objects.iter().map(|b| b * BLOCK).collect(),
            _ => value_sizes.clone(),
        };
        for &size in &sizes {
            let (key_len, explicit, default) = if w.is_seed000() {
                (8, args.seed_keys, seed_default)
            } else {
                (16, args.num, max_entries)
            };
            let num = capped(explicit, default, key_len + size);
            let modes: Vec<Option<bool>> = if w.is_read_only() {
                vec![None]
            } else {
                syncs.iter().map(|&s| Some(s)).collect()
            };
            let thread_counts = match (&threads, w) {
                (_, w) if !w.is_threaded() => vec![1],
                (Some(t), _) => t.clone(),
                (None, Workload::ReadWhileWriting) => vec![4],
                (None, _) => vec![1],
            };
            let cache = match cache_bytes {
                None if w.is_scaling() => Some(default_read_cache(size, num)),
                c => c,
            };
            for &t in &thread_counts {
                for &sync in &modes {
                    for &enc in &encrypt {
                        cases.push(Case {
                            workload: w,
                            value_bytes: size,
                            sync,
                            // readwhilewriting's num counts reads, which sync does not slow.
                            num: if sync == Some(true) && w != Workload::ReadWhileWriting {
                                sync_num(num)
                            } else {
                                num
                            },
                            reads: args.reads.filter(|_| w == Workload::ReadRandom),
                            threads: t,
                            encrypt: enc,
                            cache_bytes: cache,
                            duration: duration.filter(|_| w.is_scaling()),
                        });
                    }
                }
            }
        }
    }
    if cases.is_empty() {
        if only_reencrypt {
            return Ok(Plan {
                cases,
                notes: Vec::new(),
            });
        }
        return Err("nothing to run".into());
    }
    if encrypt.contains(&Encrypt::NoneAgain) {
        notes.push("none-again rows: the plain store a second time, in turn with the others; their ratio to none is the host's own spread".into());
    }
    if encrypt.iter().any(|m| m.seals_value_log()) {
        notes.push("encrypted rows (cpu, gpu, auto): AES-256-GCM on every block of every file (value log included), a fresh random master key per store".into());
    }
    if encrypt.iter().any(|m| m.encrypts() && !m.seals_value_log()) {
        notes.push("index-only rows (*-index): tables and manifest under AES-256-GCM, the value log under CRC32C (seed 000's index encryption without log encryption)".into());
    }
    if let Some(r) = args.reads {
        notes.push(format!(
            "readrandom: {r} timed gets over the num entries (--reads)"
        ));
    }
    notes.push("each timed part starts after `sync` (no earlier run's dirty pages still being written back)".into());
    notes.push(format!(
        "counts not given are capped at {} of key+value per workload",
        size_label(max_bytes as usize)
    ));
    if syncs.contains(&true) {
        notes.push(format!(
            "sync on: every put/delete waits for fsync; such workloads run num/1000 ops (at least min(num, {sync_floor})); readwhilewriting keeps num reads"
        ));
    }
    if workloads.iter().any(|w| w.is_seed000()) {
        notes.push(format!(
            "seed 000: random 64-bit keys, objects of 512 B blocks (the seed's base system is unencrypted: compare its rows at --encrypt none); remove runs on {remove_blocks}-block objects only, as in the seed (a remove logs no object)"
        ));
    }
    if workloads.contains(&Workload::ReadWhileWriting) {
        notes.push(format!(
            "readwhilewriting: {} reader threads share num random gets while one writer overwrites random keys until they finish",
            list(threads.as_deref().unwrap_or(&[4]))
        ));
    }
    if workloads.iter().any(|w| w.is_scaling()) {
        let counts = threads.as_deref().unwrap_or(&[1]);
        notes.push(format!(
            "readrandom, readseq on {} thread(s): one store per value size and mode, filled in random order, fully compacted (compact_range over all keys, then background work settled), closed and opened again, and warmed by one untimed scan; every thread count then reads it in turn; readrandom's threads split the gets, readseq's each scan a contiguous 1/N of the keys; {}; block cache {}",
            list(counts),
            match duration {
                Some(d) => format!("each thread reads for {} s", d.as_secs_f64()),
                None => "count-based (--duration N: time-based)".into(),
            },
            match cache_bytes {
                Some(c) => format!("{} (--cache-mb)", size_label(c)),
                None => "about twice the tables' decoded blocks, at least 64 MiB (--cache-mb)".into(),
            }
        ));
        notes.push("scaling = ops/s over the 1-thread row of the same workload, size and mode; space: every file of the store after the fill and the full compaction, over the live key+value bytes".into());
        if !counts.contains(&1) {
            notes.push("no 1-thread run in --threads: no scaling figures".into());
        }
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        if counts.iter().any(|&t| t > cores) {
            notes.push(format!(
                "more threads than this machine's {cores} cores: those rows measure sharing, not scaling"
            ));
        }
    }
    if args.profile {
        notes.push("profile (us/op, summed over the worker threads): wall = each worker's time from its start to its end; blocked = wall - cpu - queued (asleep: locks, condition variables, I/O); others = CPU time of the process's other threads over the timed part (getrusage; flushes, compactions, read-ahead workers, a writer); vcsw, icsw = the workers' voluntary (blocked) and involuntary (preempted) context switches per op".into());
    }
    Ok(Plan { cases, notes })
}

/// "1,2,4".
fn list(counts: &[usize]) -> String {
    counts
        .iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// A block cache that holds every table block of `num` entries of
/// `value_bytes`, at least 64 MiB: twice an estimate of what the decoded
/// blocks are charged (each entry's encoded bytes: key, sequence and type,
/// lengths and the value, or a value-log pointer for values the store
/// keeps out of its tables; its decoded key, 24 bytes; its 32-byte slot).
/// 2.3 M entries of 100 B: 847 MB, for 397 MB of blocks measured.
fn default_read_cache(value_bytes: usize, num: u64) -> usize {
    let in_table = if value_bytes < gvault_store::Options::default().value_threshold {
        value_bytes
    } else {
        20
    };
    let per_entry = (16 + 8 + 3 + in_table + 24 + 32) as u128;
    let bytes = (2 * num as u128 * per_entry).min(usize::MAX as u128) as usize;
    bytes.max(64 << 20)
}

/// The median run by throughput.
fn row(case: &Case, mut runs: Vec<Outcome>, profile: bool) -> Row {
    runs.sort_by(|a, b| (a.ops as f64 / a.secs).total_cmp(&(b.ops as f64 / b.secs)));
    let n = runs.len();
    let m = runs.swap_remove(n / 2);
    let secs = m.secs.max(1e-9);
    let reads = case.workload.is_read_only() || case.workload == Workload::ReadWhileWriting;
    let moved = if reads {
        m.bytes_read
    } else {
        m.user_bytes_written
    };
    let per_op = |x: f64| x * 1e6 / m.ops.max(1) as f64;
    Row {
        group: if case.workload.is_seed000() {
            "seed000"
        } else {
            "db_bench"
        },
        workload: case.workload.name(),
        encrypt: case.encrypt.name(),
        value_bytes: case.value_bytes,
        sync: case.sync,
        num: case.num,
        threads: case.workload.is_threaded().then_some(case.threads),
        runs: n,
        ops: m.ops,
        seconds: m.secs,
        ops_per_sec: m.ops as f64 / secs,
        scaling: None,
        mb_per_sec: moved as f64 / secs / 1e6,
        user_bytes_written: m.user_bytes_written,
        process_bytes_written: m.process_bytes_written,
        write_amp: m
            .process_bytes_written
            .filter(|_| m.user_bytes_written > 0)
            .map(|p| p as f64 / m.user_bytes_written as f64),
        writer_ops_per_sec: m.writer_ops.map(|w| w as f64 / secs),
        thread_cpu_us_per_op: m.workers.sched.map(|t| per_op(t.0)),
        thread_queued_us_per_op: m.workers.sched.map(|t| per_op(t.1)),
        cache_bytes: case.cache_bytes,
        profile: profile.then(|| profile_of(&m)),
        enc_vs_plain: None,
        enc_vs_plain_paired: None,
    }
}

/// Where one run's worker time went, per op.
fn profile_of(m: &Outcome) -> Profile {
    let ops = m.ops.max(1) as f64;
    let w = &m.workers;
    let cpu = w.sched.map(|s| s.0);
    Profile {
        wall_us_per_op: w.wall_secs * 1e6 / ops,
        // The two clocks are read a moment apart: never below zero.
        blocked_us_per_op: w
            .sched
            .map(|(c, q)| (w.wall_secs - c - q).max(0.0) * 1e6 / ops),
        other_threads_cpu_us_per_op: m
            .process_cpu_secs
            .zip(cpu)
            .map(|(p, c)| (p - c).max(0.0) * 1e6 / ops),
        voluntary_switches_per_op: w.switches.map(|s| s.0 as f64 / ops),
        involuntary_switches_per_op: w.switches.map(|s| s.1 as f64 / ops),
    }
}

fn print_header(profile: bool) {
    print!(
        "{:<18} {:>10} {:>8} {:>6} {:>4} {:>9} {:>12} {:>7} {:>10} {:>8} {:>14} {:>9} {:>15}",
        "workload",
        "enc",
        "value",
        "sync",
        "thr",
        "num",
        "ops/s",
        "scaling",
        "MB/s",
        "w-amp",
        "writer ops/s",
        "enc/plain",
        "us/op cpu+queue",
    );
    if profile {
        print!(
            " {:>9} {:>9} {:>9} {:>8} {:>8}",
            "wall", "blocked", "others", "vcsw/op", "icsw/op"
        );
    }
    println!("  paired enc/plain");
}

fn print_row(r: &Row, profile: bool) {
    let wa = match (r.write_amp, r.user_bytes_written) {
        (Some(w), _) => format!("{w:.2}"),
        (None, 0) => "-".into(),
        (None, _) => "n/a".into(),
    };
    let sched = match (r.thread_cpu_us_per_op, r.thread_queued_us_per_op) {
        (Some(c), Some(q)) => format!("{c:.2}+{q:.2}"),
        _ => "-".into(),
    };
    // Median of the per-repeat ratios [least, greatest].
    let paired = r.enc_vs_plain_paired.map_or(String::new(), |p| {
        format!("{:.2} [{:.2}, {:.2}]", p.median, p.min, p.max)
    });
    let opt = |x: Option<f64>, digits: usize| x.map_or("-".into(), |x| format!("{x:.digits$}"));
    print!(
        "{:<18} {:>10} {:>8} {:>6} {:>4} {:>9} {:>12.0} {:>7} {:>10.2} {:>8} {:>14} {:>9} {:>15}",
        r.workload,
        r.encrypt,
        size_label(r.value_bytes),
        match r.sync {
            Some(true) => "on",
            Some(false) => "off",
            None => "-",
        },
        r.threads.map_or("-".into(), |t| t.to_string()),
        r.num,
        r.ops_per_sec,
        opt(r.scaling, 2),
        r.mb_per_sec,
        wa,
        r.writer_ops_per_sec
            .map_or("-".into(), |w| format!("{w:.0}")),
        opt(r.enc_vs_plain, 2),
        sched,
    );
    if profile {
        if let Some(p) = &r.profile {
            print!(
                " {:>9.2} {:>9} {:>9} {:>8} {:>8}",
                p.wall_us_per_op,
                opt(p.blocked_us_per_op, 2),
                opt(p.other_threads_cpu_us_per_op, 2),
                opt(p.voluntary_switches_per_op, 3),
                opt(p.involuntary_switches_per_op, 3),
            );
        }
    }
    println!("  {paired}");
}

fn print_space(s: &SpaceRow) {
    let mb = |b: u64| b as f64 / 1e6;
    // Bytes of files the current version no longer holds.
    let obsolete = |disk: u64, live: u64| match disk.saturating_sub(live) {
        x if x < 50_000 => String::new(),
        x => format!(" ({:.1} obsolete)", mb(x)),
    };
    print!(
        "{:<18} {:>10} {:>8}  space_amp {:.2}: {:.1} MB on disk (tables {:.1}{}, value log {:.1}{}, other {:.1}; {:.1} once reopened) for {:.1} MB of live keys+values; fill {:.1} s, full compaction {:.1} s; block cache {:.1} MB used",
        "space",
        s.encrypt,
        size_label(s.value_bytes),
        s.space_amp,
        mb(s.disk_bytes),
        mb(s.disk_table_bytes),
        obsolete(s.disk_table_bytes, s.version_table_bytes),
        mb(s.disk_vlog_bytes),
        obsolete(s.disk_vlog_bytes, s.version_vlog_bytes),
        mb(s.disk_other_bytes),
        mb(s.reopened_bytes),
        mb(s.live_bytes),
        s.fill_seconds,
        s.compact_seconds,
        mb(s.cache_used_bytes as u64),
    );
    match s.cache_bytes {
        Some(c) if (c as u64) < s.version_table_bytes => println!(
            " of {:.1}: smaller than the tables, the data is NOT all cached (raise --cache-mb)",
            mb(c as u64)
        ),
        Some(c) if s.cache_used_bytes as f64 >= 0.99 * c as f64 => println!(
            " of {:.1}: full, some of the data may not be cached (raise --cache-mb)",
            mb(c as u64)
        ),
        Some(c) => println!(" of {:.1}", mb(c as u64)),
        None => println!(),
    }
}

#[cfg(test)]
mod tests {
    use super::data::ThreadTimes;
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        lsm: LsmArgs,
    }

    fn args(a: &[&str]) -> Result<LsmArgs, String> {
        Cli::try_parse_from(std::iter::once("lsm").chain(a.iter().copied()))
            .map(|c| c.lsm)
            .map_err(|e| e.to_string())
    }

    fn planned(a: &[&str]) -> Result<Plan, String> {
        plan(&args(a)?)
    }

    /// (workload, threads, mode) of each case, in plan order.
    fn shape(p: &Plan) -> Vec<(&'static str, usize, &'static str)> {
        p.cases
            .iter()
            .map(|c| (c.workload.name(), c.threads, c.encrypt.name()))
            .collect()
    }

    #[test]
    fn a_thread_sweep_runs_each_count_once_in_ascending_order() {
        let p = planned(&[
            "--workloads",
            "readrandom,fillseq,readwhilewriting",
            "--threads",
            "4,1,2,2",
            "--value-sizes",
            "100",
            "--num",
            "1000",
            "--sync",
            "off",
            "--encrypt",
            "cpu,none",
        ])
        .unwrap();
        let mut want = Vec::new();
        for t in [1, 2, 4] {
            want.push(("readrandom", t, "none"));
            want.push(("readrandom", t, "cpu"));
        }
        want.push(("fillseq", 1, "none"));
        want.push(("fillseq", 1, "cpu"));
        for t in [1, 2, 4] {
            want.push(("readwhilewriting", t, "none"));
            want.push(("readwhilewriting", t, "cpu"));
        }
        assert_eq!(shape(&p), want);
        // Reads get a cache that holds their tables; the others keep the
        // store's default.
        for c in &p.cases {
            match c.workload {
                Workload::ReadRandom => {
                    assert_eq!(c.cache_bytes, Some(default_read_cache(100, 1000)))
                }
                _ => assert_eq!(c.cache_bytes, None),
            }
        }
    }

    #[test]
    fn without_threads_reads_run_on_one_and_readwhilewriting_on_four() {
        let p = planned(&[
            "--workloads",
            "readseq,readwhilewriting",
            "--value-sizes",
            "4K",
            "--num",
            "10",
            "--sync",
            "off",
        ])
        .unwrap();
        assert_eq!(
            shape(&p),
            [("readseq", 1, "none"), ("readwhilewriting", 4, "none")]
        );
        assert!(p.cases.iter().all(|c| c.duration.is_none()));
        assert!(
            !p.notes.iter().any(|n| n.contains("no scaling")),
            "{:?}",
            p.notes
        );
    }

    #[test]
    fn duration_and_cache_apply_where_they_should() {
        let p = planned(&[
            "--workloads",
            "readrandom,readseq,overwrite",
            "--threads",
            "2,8",
            "--duration",
            "0.5",
            "--cache-mb",
            "3",
            "--value-sizes",
            "100",
            "--num",
            "10",
            "--sync",
            "off",
        ])
        .unwrap();
        for c in &p.cases {
            assert_eq!(
                c.cache_bytes,
                Some(3 << 20),
                "--cache-mb reaches every store"
            );
            let want = c
                .workload
                .is_scaling()
                .then_some(Duration::from_millis(500));
            assert_eq!(c.duration, want, "{}", c.workload.name());
        }
        assert!(p.notes.iter().any(|n| n.contains("no 1-thread run")));
    }

    #[test]
    fn bad_thread_counts_durations_and_caches_are_refused() {
        for bad in [
            &["--threads", "0"][..],
            &["--threads", "1,2000"],
            &["--duration", "0"],
            &["--duration", "-1"],
            &["--duration", "NaN"],
            &["--duration", "inf"],
            &["--cache-mb", "18446744073709551615"],
        ] {
            let mut a = vec!["--workloads", "readrandom", "--num", "10"];
            a.extend_from_slice(bad);
            assert!(planned(&a).is_err(), "{bad:?} accepted");
        }
        // --duration replaces --reads: both at once is an error.
        assert!(args(&["--duration", "1", "--reads", "5"]).is_err());
        assert!(args(&["--threads", "x"]).is_err());
    }

    #[test]
    fn units_share_one_store_per_value_size_across_workloads_threads_and_modes() {
        let p = planned(&[
            "--workloads",
            "readrandom,fillseq,readseq",
            "--threads",
            "1,2",
            "--value-sizes",
            "100,4K",
            "--num",
            "10",
            "--sync",
            "off",
            "--encrypt",
            "none,cpu",
        ])
        .unwrap();
        let u: Vec<Vec<(&str, usize, usize, &str)>> = units(&p.cases)
            .into_iter()
            .map(|unit| {
                unit.into_iter()
                    .map(|j| {
                        let c = &p.cases[j];
                        (
                            c.workload.name(),
                            c.value_bytes,
                            c.threads,
                            c.encrypt.name(),
                        )
                    })
                    .collect()
            })
            .collect();
        assert_eq!(u.len(), 4, "{u:?}");
        for (unit, size) in [(&u[0], 100), (&u[1], 4096)] {
            assert_eq!(unit.len(), 8, "{unit:?}");
            assert!(unit.iter().all(|c| c.1 == size), "{unit:?}");
            // readrandom's rows first, each thread count's modes together.
            assert_eq!(unit[0], ("readrandom", size, 1, "none"));
            assert_eq!(unit[3], ("readrandom", size, 2, "cpu"));
            assert_eq!(unit[4], ("readseq", size, 1, "none"));
        }
        assert_eq!(
            u[2],
            [("fillseq", 100, 1, "none"), ("fillseq", 100, 1, "cpu")]
        );
        assert_eq!(u[3][0], ("fillseq", 4096, 1, "none"));
        let all: usize = u.iter().map(Vec::len).sum();
        assert_eq!(all, p.cases.len(), "each case in one unit");
    }

    #[test]
    fn the_default_read_cache_holds_the_tables() {
        // Values kept in the tables: their blocks decoded (each entry's
        // encoded bytes, decoded key and slot) two times over at least.
        let small = default_read_cache(100, 2_300_000);
        assert!(small >= 2 * 2_300_000 * (116 + 24 + 32), "{small}");
        // Values in the value log leave pointers in the tables.
        let large = default_read_cache(65536, 50_000_000);
        assert!(
            large < 50_000_000 * 300,
            "pointers, not 64 KiB values: {large}"
        );
        assert!(large > 50_000_000 * 16, "{large}");
        assert_eq!(default_read_cache(100, 10), 64 << 20, "the floor");
        assert_eq!(default_read_cache(100, u64::MAX), usize::MAX, "no overflow");
    }

    fn outcome(ops: u64, secs: f64) -> Outcome {
        Outcome {
            ops,
            secs,
            ..Outcome::default()
        }
    }

    #[test]
    fn rows_scale_against_their_own_one_thread_row() {
        let p = planned(&[
            "--workloads",
            "readrandom",
            "--threads",
            "1,2",
            "--value-sizes",
            "100",
            "--num",
            "10",
            "--encrypt",
            "none,cpu",
            "--repeat",
            "2",
        ])
        .unwrap();
        let cases: Vec<&Case> = p.cases.iter().collect();
        // (1, none), (1, cpu), (2, none), (2, cpu); medians 100, 50, 180, 120.
        let runs = vec![
            vec![outcome(100, 1.0), outcome(100, 1.0)],
            vec![outcome(50, 1.0), outcome(50, 1.0)],
            vec![outcome(180, 1.0), outcome(180, 1.0)],
            vec![outcome(120, 1.0), outcome(120, 1.0)],
        ];
        let rows = finish_rows(
            &cases,
            runs,
            false,
            &mut PlainRates::default(),
            &mut OneThreadRates::default(),
        );
        type Got = (Option<usize>, &'static str, Option<f64>, Option<f64>);
        let got: Vec<Got> = rows
            .iter()
            .map(|r| (r.threads, r.encrypt, r.scaling, r.enc_vs_plain))
            .collect();
        assert_eq!(
            got,
            [
                (Some(1), "none", Some(1.0), None),
                (Some(1), "cpu", Some(1.0), Some(0.5)),
                (Some(2), "none", Some(1.8), None),
                (Some(2), "cpu", Some(2.4), Some(120.0 / 180.0)),
            ]
        );
        assert!(rows.iter().all(|r| r.profile.is_none()));
        let paired = rows[3].enc_vs_plain_paired.unwrap();
        assert!((paired.median - 120.0 / 180.0).abs() < 1e-12);

        // Without a 1-thread row there is nothing to scale against.
        let two: Vec<&Case> = cases[2..].to_vec();
        let rows = finish_rows(
            &two,
            vec![vec![outcome(180, 1.0)], vec![outcome(120, 1.0)]],
            true,
            &mut PlainRates::default(),
            &mut OneThreadRates::default(),
        );
        assert!(rows.iter().all(|r| r.scaling.is_none()));
        assert!(rows.iter().all(|r| r.profile.is_some()));
    }

    #[test]
    fn the_profile_splits_wall_time_into_cpu_queue_and_blocked() {
        let m = Outcome {
            ops: 1000,
            secs: 1.0,
            workers: ThreadTimes {
                wall_secs: 2.0,
                sched: Some((1.0, 0.5)),
                switches: Some((100, 10)),
            },
            process_cpu_secs: Some(1.8),
            ..Outcome::default()
        };
        let p = profile_of(&m);
        let close = |a: Option<f64>, b: f64| a.is_some_and(|a| (a - b).abs() < 1e-9);
        assert!((p.wall_us_per_op - 2000.0).abs() < 1e-9, "{p:?}");
        assert!(close(p.blocked_us_per_op, 500.0), "{p:?}");
        assert!(close(p.other_threads_cpu_us_per_op, 800.0), "{p:?}");
        assert!(close(p.voluntary_switches_per_op, 0.1), "{p:?}");
        assert!(close(p.involuntary_switches_per_op, 0.01), "{p:?}");
        // Figures the kernel did not give stay empty.
        let bare = profile_of(&Outcome {
            workers: ThreadTimes {
                wall_secs: 1.0,
                ..ThreadTimes::default()
            },
            ..m
        });
        assert_eq!(bare.blocked_us_per_op, None);
        assert_eq!(bare.other_threads_cpu_us_per_op, None);
        assert_eq!(bare.voluntary_switches_per_op, None);
    }
}
