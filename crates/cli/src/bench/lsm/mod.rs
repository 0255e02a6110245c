//! `gvault bench lsm`: the store's LSM engine under LevelDB db_bench's
//! workloads (fillseq, fillrandom, overwrite, readrandom, readseq,
//! readwhilewriting; 16-byte keys) and seed 000 §4.5's insert, search and
//! remove of random 64-bit keys with objects of 512-byte blocks. Reports
//! ops/s, MB/s and write amplification (bytes the process wrote to files
//! over bytes the user wrote).

mod data;
mod workloads;

use std::path::PathBuf;

use serde::Serialize;

use super::measure::{parse_size, size_label};
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
}

#[derive(Serialize)]
struct Row {
    group: &'static str,
    workload: &'static str,
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
}

struct Plan {
    cases: Vec<Case>,
    notes: Vec<String>,
}

pub fn run(args: LsmArgs) -> Result<(), String> {
    let plan = plan(&args)?;
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
                format!("median of {} timed runs per workload", args.repeat)
            }
        );
        for n in &notes {
            println!("note: {n}");
        }
        println!(
            "{:<18} {:>8} {:>6} {:>9} {:>12} {:>10} {:>8} {:>14}",
            "workload", "value", "sync", "num", "ops/s", "MB/s", "w-amp", "writer ops/s"
        );
    }
    let mut rows = Vec::new();
    for case in &plan.cases {
        let mut runs = Vec::with_capacity(args.repeat);
        for r in 0..args.repeat {
            runs.push(run_case(base.path(), case, r).map_err(|e| {
                format!("{} ({} bytes): {e}", case.workload.name(), case.value_bytes)
            })?);
        }
        let row = row(case, runs);
        if !args.json {
            print_row(&row);
        }
        rows.push(row);
    }
    if args.json {
        let report = Report {
            machine,
            runs_per_workload: args.repeat,
            notes,
            rows,
        };
        println!(
            "{}",
            serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?
        );
    }
    base.close()
        .map_err(|e| format!("removing the benchmark directory: {e}"))
}

fn plan(args: &LsmArgs) -> Result<Plan, String> {
    if args.repeat == 0 || args.threads == 0 {
        return Err("--repeat and --threads must be at least 1".into());
    }
    if args.num == Some(0) || args.seed_keys == Some(0) {
        return Err("--num and --seed-keys must be at least 1".into());
    }
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
        "MB = 10^6 bytes; write amplification = bytes this process passed to write(2) (/proc/self/io wchar) from the start of the timed part until flushes and compactions settled, over key+value bytes written".into(),
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
                    threads: args.threads,
                });
            }
        }
    }
    if cases.is_empty() {
        return Err("nothing to run".into());
    }
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
            "seed 000: random 64-bit keys, objects of 512 B blocks, no encryption (the seed's base system); remove runs on {remove_blocks}-block objects only, as in the seed (a remove logs no object)"
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
    }
}

fn print_row(r: &Row) {
    let wa = match (r.write_amp, r.user_bytes_written) {
        (Some(w), _) => format!("{w:.2}"),
        (None, 0) => "-".into(),
        (None, _) => "n/a".into(),
    };
    println!(
        "{:<18} {:>8} {:>6} {:>9} {:>12.0} {:>10.2} {:>8} {:>14}",
        r.workload,
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
    );
}
