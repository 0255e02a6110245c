//! `gvault bench lsm`: the store's LSM engine under LevelDB db_bench's
//! workloads (fillseq, fillrandom, overwrite, readrandom, readseq,
//! readwhilewriting; 16-byte keys) and seed 000 §4.5's insert, search and
//! remove of random 64-bit keys with objects of 512-byte blocks. Reports
//! ops/s, MB/s and write amplification (bytes the process wrote to files
//! over bytes the user wrote). `--encrypt` runs each workload unencrypted
//! and/or with AES-256-GCM on the CPU, GPU or auto backend; `--reencrypt`
//! times the re-encryption pass after a key rotation against a disk copy.

mod data;
mod encrypt;
mod reencrypt;
mod workloads;

use std::path::PathBuf;

use serde::Serialize;

use super::measure::{parse_size, size_label};
use encrypt::{Backends, Encrypt, PlainRates};
use workloads::{run_case, Case, Outcome, Workload};

/// Seed 000's object unit.
const BLOCK: usize = 512;

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
    /// Timed gets of readrandom (db_bench --reads) [default: --num]: longer
    /// runs of large values without a larger store.
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
    /// Reader threads of readwhilewriting.
    #[arg(long, default_value_t = 4)]
    threads: usize,
    /// Timed runs per workload (each in a fresh store); the median is reported.
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
    threads: Option<usize>,
    runs: usize,
    ops: u64,
    seconds: f64,
    ops_per_sec: f64,
    /// Written key+value bytes per second for writers; returned bytes per
    /// second for readers (readwhilewriting: its readers). MB = 10^6 bytes.
    mb_per_sec: f64,
    user_bytes_written: u64,
    process_bytes_written: Option<u64>,
    write_amp: Option<f64>,
    writer_ops_per_sec: Option<f64>,
    /// The timing thread's microseconds per op on a CPU, and queued for
    /// one (wall time above both: it slept).
    thread_cpu_us_per_op: Option<f64>,
    thread_queued_us_per_op: Option<f64>,
    /// ops/s over the unencrypted run of the same workload, size and sync
    /// (the ratio of the two medians).
    enc_vs_plain: Option<f64>,
    /// The same ratio repeat by repeat (modes run back to back in each):
    /// median, least and greatest.
    enc_vs_plain_paired: Option<encrypt::Paired>,
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
    reencrypt: Option<reencrypt::ReencryptRow>,
}

struct Plan {
    cases: Vec<Case>,
    notes: Vec<String>,
}

pub fn run(args: LsmArgs) -> Result<(), String> {
    let plan = plan(&args)?;
    let mut modes = args.encrypt.clone();
    // Re-encryption is timed on a fully sealed store (an index-only one
    // would skip its value log).
    if args.reencrypt.is_some() && !modes.iter().any(|m| m.seals_value_log()) {
        modes.push(Encrypt::Cpu);
    }
    let mut backends = Backends::new(&modes)?;
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
            println!(
                "{:<18} {:>10} {:>8} {:>6} {:>9} {:>12} {:>10} {:>8} {:>14} {:>9} {:>15}  paired enc/plain",
                "workload",
                "enc",
                "value",
                "sync",
                "num",
                "ops/s",
                "MB/s",
                "w-amp",
                "writer ops/s",
                "enc/plain",
                "us/op cpu+queue",
            );
        }
    }
    let mut rows = Vec::new();
    let mut plain = PlainRates::default();
    // The modes of one (workload, size, sync) take turns within each repeat
    // (none, cpu, auto, then cpu, auto, none, ...), so that host noise (other
    // tenants, frequency, page cache) hits every mode alike; each row is the
    // median of its mode's runs, and the ratio is taken between medians
    // (enc/plain) and repeat by repeat (paired enc/plain).
    for group in plan.cases.chunk_by(|a, b| a.same_cell(b)) {
        let mut runs: Vec<Vec<Outcome>> = group
            .iter()
            .map(|_| Vec::with_capacity(args.repeat))
            .collect();
        for r in 0..args.repeat {
            // Each repeat starts with the next mode, so no mode always runs
            // right after the same other one (what a run leaves behind, in
            // the page cache, the allocator and the CPU pool, then lands on
            // every mode alike).
            let k = group.len();
            for i in (0..k).map(|i| (i + r) % k) {
                let (case, case_runs) = (&group[i], &mut runs[i]);
                case_runs.push(run_case(base.path(), case, r, &backends).map_err(|e| {
                    format!(
                        "{} ({} bytes, encrypt {}): {e}",
                        case.workload.name(),
                        case.value_bytes,
                        case.encrypt.name()
                    )
                })?);
            }
        }
        let rates = |r: &[Outcome]| -> Vec<f64> {
            r.iter().map(|o| o.ops as f64 / o.secs.max(1e-9)).collect()
        };
        let plain_rates = group
            .iter()
            .position(|c| c.encrypt == Encrypt::None)
            .map(|i| rates(&runs[i]));
        for (case, case_runs) in group.iter().zip(runs) {
            let paired = match &plain_rates {
                Some(p) if case.encrypt != Encrypt::None => encrypt::paired(p, &rates(&case_runs)),
                _ => None,
            };
            let mut row = row(case, case_runs);
            row.enc_vs_plain_paired = paired;
            row.enc_vs_plain = plain.ratio(
                case.encrypt,
                (row.workload, row.value_bytes, row.sync),
                row.ops_per_sec,
            );
            if !args.json {
                print_row(&row);
            }
            rows.push(row);
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
    if args.json {
        let report = Report {
            machine,
            runs_per_workload: args.repeat,
            notes,
            rows,
            reencrypt,
        };
        println!(
            "{}",
            serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?
        );
    }
    base.close()
        .map_err(|e| format!("removing the benchmark directory: {e}"))
}

/// The auto rows with a ratio to plain, each beside its cell's none-again
/// ratio (same workload, size and sync) where that mode ran.
fn target_cells(rows: &[Row]) -> Vec<encrypt::TargetCell> {
    let cell = |r: &Row| (r.workload, r.value_bytes, r.sync);
    rows.iter()
        .filter(|r| r.encrypt == Encrypt::Auto.name())
        .filter_map(|r| {
            let control = rows
                .iter()
                .find(|c| c.encrypt == Encrypt::NoneAgain.name() && cell(c) == cell(r))
                .and_then(|c| c.enc_vs_plain);
            Some(encrypt::TargetCell {
                label: format!("{} {}", r.workload, size_label(r.value_bytes)),
                value_bytes: r.value_bytes,
                ratio: r.enc_vs_plain?,
                control,
            })
        })
        .collect()
}

fn plan(args: &LsmArgs) -> Result<Plan, String> {
    if args.repeat == 0 || args.threads == 0 {
        return Err("--repeat and --threads must be at least 1".into());
    }
    if args.num == Some(0) || args.seed_keys == Some(0) || args.reads == Some(0) {
        return Err("--num, --reads and --seed-keys must be at least 1".into());
    }
    if let Some(g) = args.reencrypt {
        if !(g > 0.0 && g.is_finite()) {
            return Err("--reencrypt is a size in GiB, above 0".into());
        }
    }
    let mut encrypt = args.encrypt.clone();
    encrypt.sort_by_key(|m| *m != Encrypt::None); // plain first, for the ratio
    encrypt.dedup();
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
        "MB = 10^6 bytes; write amplification = bytes this process passed to write(2) (/proc/self/io wchar) from the start of the timed part until flushes and compactions settled, over key+value bytes written; us/op cpu+queue = the timing thread's microseconds per op on a CPU and runnable but queued (/proc/thread-self/schedstat): wall time above both is time it slept (locks, I/O, waiting on other threads); paired enc/plain = each repeat's encrypted ops/s over the plain ops/s of the same repeat (the modes run back to back): median [least, greatest]".into(),
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
            for sync in modes {
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
                        threads: args.threads,
                        encrypt: enc,
                    });
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
            args.threads
        ));
    }
    Ok(Plan { cases, notes })
}

/// The median run by throughput.
fn row(case: &Case, mut runs: Vec<Outcome>) -> Row {
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
        threads: (case.workload == Workload::ReadWhileWriting).then_some(case.threads),
        runs: n,
        ops: m.ops,
        seconds: m.secs,
        ops_per_sec: m.ops as f64 / secs,
        mb_per_sec: moved as f64 / secs / 1e6,
        user_bytes_written: m.user_bytes_written,
        process_bytes_written: m.process_bytes_written,
        write_amp: m
            .process_bytes_written
            .filter(|_| m.user_bytes_written > 0)
            .map(|p| p as f64 / m.user_bytes_written as f64),
        writer_ops_per_sec: m.writer_ops.map(|w| w as f64 / secs),
        thread_cpu_us_per_op: m.thread_sched.map(|t| t.0 * 1e6 / m.ops.max(1) as f64),
        thread_queued_us_per_op: m.thread_sched.map(|t| t.1 * 1e6 / m.ops.max(1) as f64),
        enc_vs_plain: None,
        enc_vs_plain_paired: None,
    }
}

fn print_row(r: &Row) {
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
    println!(
        "{:<18} {:>10} {:>8} {:>6} {:>9} {:>12.0} {:>10.2} {:>8} {:>14} {:>9} {:>15}  {}",
        r.workload,
        r.encrypt,
        size_label(r.value_bytes),
        match r.sync {
            Some(true) => "on",
            Some(false) => "off",
            None => "-",
        },
        r.num,
        r.ops_per_sec,
        r.mb_per_sec,
        wa,
        r.writer_ops_per_sec
            .map_or("-".into(), |w| format!("{w:.0}")),
        r.enc_vs_plain.map_or("-".into(), |x| format!("{x:.2}")),
        sched,
        paired,
    );
}
