//! `gvault bench rsa`: RSA private-key operations per second against batch
//! size (seed 004 §5.2, issue 24) for 1024, 2048 and 4096-bit keys: one
//! CPU core, all cores, `openssl speed -multi <cores>` (when openssl is
//! installed), the GPU end to end (blinding, copies, kernel, checks), with
//! one job and with two batches in flight at once (`gpu-x2`: one batch's host work
//! overlaps the other's kernel, as with two service clients), the
//! GPU kernel alone, and the auto backend; then seed 004's batch ordering
//! (0, 1 and 2-pass) over many keys with uneven group sizes (the seed's
//! "mixed" requests). Every GPU result is checked with the public exponent
//! by the batch itself; the first of each size is compared with the CPU.
//!
//! `--host-only` times the batch path's host side alone, phase by phase,
//! on one core and on all: each batch's launch is run once (on the GPU,
//! or its CPU emulation) with a seeded blinding, then the timed runs,
//! blinded with the same seed, get those recorded results back at once,
//! so every result is real and passes the public-exponent check.

use std::process::Command;
use std::time::{Duration, Instant};

use gvault_accel::rsa_batch::{self, Launch, RsaHostTimes};
use gvault_accel::{
    AutoBackend, Backend, CpuBackend, GpuBackend, Job, RsaItem, RsaOptions, RsaPrivateKey, RsaSort,
};
use rand::{RngCore, SeedableRng};
use rsa::traits::PublicKeyParts;
use serde::Serialize;

use super::measure::{median, repeat};

#[derive(clap::Args, Debug)]
pub struct RsaArgs {
    /// Fewer batch sizes and shorter timing (a few minutes in all).
    #[arg(long)]
    quick: bool,
    /// Key sizes (bits): any of 1024, 2048, 4096.
    #[arg(long, value_delimiter = ',', default_values_t = vec![1024, 2048, 4096])]
    bits: Vec<usize>,
    /// Batch sizes (messages per job); default 1 to 65536, powers of 4.
    #[arg(long, value_delimiter = ',')]
    batches: Option<Vec<usize>>,
    /// Distinct keys in the ordering comparison.
    #[arg(long, default_value_t = 32)]
    sort_keys: usize,
    /// Messages in the ordering comparison's batch.
    #[arg(long, default_value_t = 16384)]
    sort_batch: usize,
    /// Skip a cell whose run would take longer than this (seconds),
    /// judged from the same column at the previous batch size.
    #[arg(long, default_value_t = 20.0)]
    max_cell_seconds: f64,
    /// Time only the host side (checks, blinding, layout, unblinding and
    /// public-exponent checks), per phase, on one core and all cores,
    /// with the kernel's results recorded beforehand; default batch 16384.
    #[arg(long)]
    host_only: bool,
    /// Print JSON instead of tables.
    #[arg(long)]
    json: bool,
    /// Also write the JSON report to this file.
    #[arg(long)]
    save: Option<std::path::PathBuf>,
}

#[derive(Serialize, Default, Clone)]
struct Row {
    bits: usize,
    batch: usize,
    cpu_1_ops: Option<f64>,
    cpu_all_ops: Option<f64>,
    openssl_all_ops: Option<f64>,
    gpu_ops: Option<f64>,
    /// Two batches in flight at once (two callers, as two service clients):
    /// one batch's host work overlaps the other's kernel.
    gpu_2_ops: Option<f64>,
    gpu_kernel_ops: Option<f64>,
    auto_ops: Option<f64>,
}

#[derive(Serialize)]
struct SortRow {
    bits: usize,
    keys: usize,
    batch: usize,
    passes: u32,
    gpu_ops: f64,
    gpu_kernel_ops: f64,
}

/// The host side of one batch on `threads` cores: medians over the timed
/// runs, microseconds a message.
#[derive(Serialize)]
struct HostRow {
    bits: usize,
    batch: usize,
    threads: usize,
    runs: usize,
    check_us: f64,
    layout_us: f64,
    blind_us: f64,
    unblind_verify_us: f64,
    host_us: f64,
    host_ops: f64,
}

#[derive(Serialize)]
struct Report {
    cores: usize,
    gpu: Option<String>,
    rows: Vec<Row>,
    sorting: Vec<SortRow>,
    host: Vec<HostRow>,
}

fn key(bits: usize, seed: u64) -> Result<RsaPrivateKey, String> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let k = rsa::RsaPrivateKey::new(&mut rng, bits).map_err(|e| e.to_string())?;
    RsaPrivateKey::from_key(k).map_err(|e| e.to_string())
}

/// `count` random messages below the key's modulus.
fn messages(key: &RsaPrivateKey, count: usize, seed: u64) -> Vec<Vec<u8>> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let n = key.inner().n();
    (0..count)
        .map(|_| {
            let mut b = vec![0u8; key.size()];
            rng.fill_bytes(&mut b);
            let v = rsa::BigUint::from_bytes_be(&b) % n;
            let be = v.to_bytes_be();
            let mut out = vec![0u8; key.size()];
            out[key.size() - be.len()..].copy_from_slice(&be);
            out
        })
        .collect()
}

/// Ops/s of `f` running `ops` operations, or None when the estimate
/// from `prev` (ops/s of the smaller batch) says it would take too long.
fn rate(
    ops: usize,
    prev: Option<f64>,
    max_s: f64,
    min_time: Duration,
    mut f: impl FnMut() -> Result<(), String>,
) -> Result<Option<f64>, String> {
    if let Some(p) = prev {
        if ops as f64 / p > max_s {
            return Ok(None);
        }
    }
    let mut err = None;
    let t = repeat(1, min_time, || {
        let start = Instant::now();
        if let Err(e) = f() {
            err.get_or_insert(e);
        }
        start.elapsed()
    });
    match err {
        Some(e) => Err(e),
        None => Ok(Some(ops as f64 / t.median.as_secs_f64())),
    }
}

/// A column of a row: the previous batch size's rate, and one run.
type Column<'c> = (Option<f64>, Box<dyn FnMut() -> Result<(), String> + 'c>);

/// Ops/s of each column, each run a job of `ops` messages, timed in
/// alternating runs (a warm-up each, then rounds of one run of each column
/// that has not yet run three times and `min_time` in all): a core or
/// clock that drifts during a row slows every column alike. Timed a minute
/// apart, one message of RSA-2048 on the same thread and path ran at
/// 276/s and 521/s on an H200 host. A column the previous batch size's
/// rate says would take over `max_s` is skipped (`None`).
fn rates_side_by_side(
    ops: usize,
    columns: Vec<Column<'_>>,
    max_s: f64,
    min_time: Duration,
) -> Result<Vec<Option<f64>>, String> {
    let skip = |p: Option<f64>| p.is_some_and(|p| ops as f64 / p > max_s);
    let mut runs: Vec<_> = columns
        .into_iter()
        .map(|(prev, f)| (!skip(prev)).then_some(f))
        .collect();
    let once = |f: &mut Box<dyn FnMut() -> Result<(), String> + '_>| {
        let start = Instant::now();
        f().map(|()| start.elapsed())
    };
    for f in runs.iter_mut().flatten() {
        once(f)?;
    }
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); runs.len()];
    let mut sums = vec![Duration::ZERO; runs.len()];
    // A column has run enough with MIN_RUNS runs and `min_time` in all;
    // the rest go on alternating without it.
    const MIN_RUNS: usize = 3;
    let enough = |t: &Vec<Duration>, sum: Duration| t.len() >= MIN_RUNS && sum >= min_time;
    loop {
        for (i, f) in runs.iter_mut().enumerate() {
            if let Some(f) = f.as_mut().filter(|_| !enough(&times[i], sums[i])) {
                let t = once(f)?;
                sums[i] += t;
                times[i].push(t);
            }
        }
        let done = runs
            .iter()
            .enumerate()
            .all(|(i, f)| f.is_none() || enough(&times[i], sums[i]));
        if done || times.iter().any(|t| t.len() >= 1000) {
            break;
        }
    }
    Ok(times
        .into_iter()
        .map(|t| {
            let secs: Vec<f64> = t.iter().map(Duration::as_secs_f64).collect();
            (!secs.is_empty()).then(|| ops as f64 / median(secs))
        })
        .collect())
}

/// Runs one RSA job; every segment must succeed.
fn run_job(b: &dyn Backend, key: &RsaPrivateKey, msgs: &[Vec<u8>]) -> Result<(), String> {
    let mut job = Job::RsaPrivate {
        key,
        segments: msgs.iter().map(|m| m.as_slice()).collect(),
    };
    for r in b.run(&mut job).map_err(|e| e.to_string())? {
        r.map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn run_batch(g: &GpuBackend, items: &[RsaItem<'_>], options: RsaOptions) -> Result<(), String> {
    for r in g
        .rsa_private_batch(items, options)
        .map_err(|e| e.to_string())?
    {
        r.map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// The same batch from two threads at once; both must succeed.
fn two_in_flight(g: &GpuBackend, items: &[RsaItem<'_>]) -> Result<(), String> {
    std::thread::scope(|s| {
        let other = s.spawn(|| run_batch(g, items, RsaOptions::default()));
        let mine = run_batch(g, items, RsaOptions::default());
        let theirs = other
            .join()
            .unwrap_or_else(|_| Err("the second RSA caller panicked".into()));
        mine.and(theirs)
    })
}

/// `openssl speed -multi <cores> -seconds <s> rsa<bits>`: sign/s, when
/// openssl is installed and its output parses.
fn openssl_speed(bits: usize, cores: usize, seconds: u32) -> Option<f64> {
    let out = Command::new("openssl")
        .args([
            "speed",
            "-multi",
            &cores.to_string(),
            "-seconds",
            &seconds.to_string(),
            &format!("rsa{bits}"),
        ])
        .output()
        .ok()?;
    parse_openssl_speed(&String::from_utf8_lossy(&out.stdout), bits)
}

/// The sign/s figure of the `rsa <bits> bits` line: after "bits", the
/// times (ending in "s") come first, then the rates, sign/s the first.
fn parse_openssl_speed(text: &str, bits: usize) -> Option<f64> {
    let tag = format!("{bits} bits");
    text.lines()
        .filter(|l| l.trim_start().starts_with("rsa") && l.contains(&tag))
        .find_map(|l| {
            let after = &l[l.find(&tag)? + tag.len()..];
            after
                .split_whitespace()
                .filter(|t| !t.ends_with('s'))
                .find_map(|t| t.parse::<f64>().ok())
        })
}

pub fn run(args: RsaArgs) -> Result<(), String> {
    for &b in &args.bits {
        if !gvault_accel::RSA_BATCH_KEY_BITS.contains(&b) {
            return Err(format!(
                "--bits {b}: the batch kernels take 1024, 2048 and 4096"
            ));
        }
    }
    let batches: Vec<usize> = match &args.batches {
        Some(b) if b.contains(&0) => return Err("--batches: a batch has at least 1 message".into()),
        Some(b) => b.clone(),
        None if args.quick => vec![1, 64, 1024, 16384],
        None => (0..=8).map(|k| 1usize << (2 * k)).collect(),
    };
    let min_time = Duration::from_millis(if args.quick { 200 } else { 1000 });
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if args.host_only {
        return run_host_only(&args, min_time, cores);
    }
    let one = CpuBackend::with_own_pool(1);
    let all = CpuBackend::shared();
    let auto = AutoBackend::shared();
    let gpu = match GpuBackend::probe() {
        Ok(g) => Some(g),
        Err(why) => {
            eprintln!("no GPU ({why}): CPU columns only");
            None
        }
    };
    let mut rows = Vec::new();
    for &bits in &args.bits {
        let k = key(bits, bits as u64)?;
        let openssl = openssl_speed(bits, cores, if args.quick { 1 } else { 3 });
        // One core's rate does not depend on the batch: measured once.
        let probe = messages(&k, 8, 1);
        let cpu_1 = rate(probe.len(), None, args.max_cell_seconds, min_time, || {
            run_job(&one, &k, &probe)
        })?;
        let mut prev = Row::default();
        for &batch in &batches {
            let msgs = messages(&k, batch, batch as u64);
            let items: Vec<RsaItem<'_>> =
                msgs.iter().map(|m| RsaItem { key: &k, input: m }).collect();
            let mut row = Row {
                bits,
                batch,
                cpu_1_ops: cpu_1,
                openssl_all_ops: openssl,
                ..Row::default()
            };
            let max = args.max_cell_seconds;
            if let Some(g) = &gpu {
                // The GPU's results against the CPU's, once per row.
                let mut job = Job::RsaPrivate {
                    key: &k,
                    segments: msgs.iter().take(4).map(|m| m.as_slice()).collect(),
                };
                let want = all.run(&mut job).map_err(|e| e.to_string())?;
                if g.run(&mut job).map_err(|e| e.to_string())? != want {
                    return Err(format!("RSA-{bits}: GPU results differ from the CPU's"));
                }
            }
            // auto against the sides it chooses from, side by side, each
            // through the backend interface auto calls (the GPU's batch
            // entry point, `gpu-x2` below, measured up to 5% faster than a
            // job at RSA-1024 x 16384 in one run; not explained).
            let mut columns: Vec<Column<'_>> = vec![
                (
                    prev.cpu_all_ops,
                    Box::new(|| run_job(all.as_ref(), &k, &msgs)),
                ),
                (
                    prev.auto_ops,
                    Box::new(|| run_job(auto.as_ref(), &k, &msgs)),
                ),
            ];
            if let Some(g) = &gpu {
                columns.push((prev.gpu_ops, Box::new(|| run_job(g, &k, &msgs))));
            }
            let rates = rates_side_by_side(batch, columns, max, min_time)?;
            row.cpu_all_ops = rates[0];
            row.auto_ops = rates[1];
            row.gpu_ops = rates.get(2).copied().flatten();
            if let Some(g) = &gpu {
                row.gpu_2_ops = rate(2 * batch, prev.gpu_2_ops, max, min_time, || {
                    two_in_flight(g, &items)
                })?;
                if prev.gpu_kernel_ops.is_none_or(|p| batch as f64 / p <= max) {
                    let t = g
                        .rsa_kernel_time(&items, RsaOptions::default(), 3)
                        .map_err(|e| e.to_string())?;
                    row.gpu_kernel_ops = Some(batch as f64 / t.as_secs_f64());
                }
            }
            if !args.json {
                print_row(&row);
            }
            prev = row.clone();
            rows.push(row);
        }
    }
    let mut sorting = Vec::new();
    if let Some(g) = &gpu {
        for &bits in args.bits.iter().filter(|&&b| b <= 2048) {
            let keys: Vec<RsaPrivateKey> = (0..args.sort_keys.max(1))
                .map(|s| key(bits, 1000 + s as u64))
                .collect::<Result<_, _>>()?;
            let src = mixed_requests(&keys, args.sort_batch, 4);
            let items: Vec<RsaItem<'_>> = src
                .iter()
                .map(|(k, m)| RsaItem {
                    key: &keys[*k],
                    input: m,
                })
                .collect();
            for sort in [RsaSort::None, RsaSort::ByKey, RsaSort::ByKeySmallFirst] {
                let options = RsaOptions { sort };
                let e2e = rate(items.len(), None, f64::MAX, min_time, || {
                    run_batch(g, &items, options)
                })?
                .unwrap_or(0.0);
                let t = g
                    .rsa_kernel_time(&items, options, 3)
                    .map_err(|e| e.to_string())?;
                let r = SortRow {
                    bits,
                    keys: keys.len(),
                    batch: items.len(),
                    passes: sort.passes(),
                    gpu_ops: e2e,
                    gpu_kernel_ops: items.len() as f64 / t.as_secs_f64(),
                };
                if !args.json {
                    println!(
                        "sort RSA-{bits} {} keys {} msgs {}-pass: gpu {:.0}/s, kernel {:.0}/s",
                        r.keys, r.batch, r.passes, r.gpu_ops, r.gpu_kernel_ops
                    );
                }
                sorting.push(r);
            }
        }
    }
    let report = Report {
        cores,
        gpu: gpu
            .as_ref()
            .and_then(|g| g.devices().first().map(|d| d.name.clone())),
        rows,
        sorting,
        host: Vec::new(),
    };
    emit(&args, &report)
}

fn emit(args: &RsaArgs, report: &Report) -> Result<(), String> {
    let json = serde_json::to_string_pretty(report).map_err(|e| e.to_string())?;
    if args.json {
        println!("{json}");
    }
    if let Some(path) = &args.save {
        std::fs::write(path, &json).map_err(|e| format!("writing {}: {e}", path.display()))?;
    }
    Ok(())
}

/// The seed of `--host-only`'s blinding: the recorded launch and every
/// timed run see the same blinded words.
const HOST_ONLY_SEED: u64 = 0x5eed;

/// `--host-only`: the host side's phases for each key size and batch, on
/// one core and on all cores.
fn run_host_only(args: &RsaArgs, min_time: Duration, cores: usize) -> Result<(), String> {
    let batches = args.batches.clone().unwrap_or_else(|| vec![16384]);
    let gpu = GpuBackend::probe().ok();
    let one_core = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .map_err(|e| e.to_string())?;
    let mut host = Vec::new();
    for &bits in &args.bits {
        let k = key(bits, bits as u64)?;
        for &batch in &batches {
            let msgs = messages(&k, batch, batch as u64);
            let items: Vec<RsaItem<'_>> =
                msgs.iter().map(|m| RsaItem { key: &k, input: m }).collect();
            let start = Instant::now();
            let recorded = record_launches(&items, gpu.as_ref())?;
            if !args.json {
                println!(
                    "RSA-{bits} x {batch}: kernel results recorded in {:.1} s ({})",
                    start.elapsed().as_secs_f64(),
                    if gpu.is_some() {
                        "GPU"
                    } else {
                        "CPU emulation"
                    }
                );
            }
            for threads in [1, cores] {
                let row = if threads == 1 {
                    one_core.install(|| host_phases(&items, &recorded, min_time))?
                } else {
                    host_phases(&items, &recorded, min_time)?
                };
                let row = HostRow {
                    bits,
                    batch,
                    threads,
                    ..row
                };
                if !args.json {
                    print_host_row(&row);
                }
                host.push(row);
                if cores == 1 {
                    break;
                }
            }
        }
    }
    let report = Report {
        cores,
        gpu: gpu
            .as_ref()
            .and_then(|g| g.devices().first().map(|d| d.name.clone())),
        rows: Vec::new(),
        sorting: Vec::new(),
        host,
    };
    emit(args, &report)
}

/// One launch and the kernel's output words for it.
struct Recorded {
    launch: Launch,
    output: Vec<u32>,
}

/// Runs the batch once with `--host-only`'s blinding seed, keeping each
/// launch and its results (from the GPU, else the CPU emulation).
fn record_launches(
    items: &[RsaItem<'_>],
    gpu: Option<&GpuBackend>,
) -> Result<Vec<Recorded>, String> {
    let mut recorded = Vec::new();
    let mut exec = |l: &Launch| -> Result<Vec<u32>, String> {
        let output = match gpu {
            Some(g) => g.rsa_execute(l).map_err(|e| e.to_string())?,
            None => rsa_batch::emulate(l),
        };
        recorded.push(Recorded {
            launch: Launch {
                limbs: l.limbs,
                window: l.window,
                keys: l.keys.clone(),
                msg_key: l.msg_key.clone(),
                input: l.input.clone(),
            },
            output: output.clone(),
        });
        Ok(output)
    };
    seeded_run(items, &mut exec, &mut RsaHostTimes::default())?;
    Ok(recorded)
}

/// One batch with the host-only mode's seeded blinding, its phases timed
/// into `times`; every result must pass the public-exponent check.
fn seeded_run(
    items: &[RsaItem<'_>],
    exec: &mut dyn FnMut(&Launch) -> Result<Vec<u32>, String>,
    times: &mut RsaHostTimes,
) -> Result<(), String> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(HOST_ONLY_SEED);
    let results = rsa_batch::run_timed(items, RsaOptions::default(), exec, &mut rng, times)
        .map_err(|e| e.to_string())?;
    for r in results {
        r.map_err(|e| format!("host-only run: {e}"))?;
    }
    Ok(())
}

/// The host phases of `items` on the current rayon pool, the launches
/// answered from `recorded` (after checking they are the recorded ones):
/// per-phase medians over at least 5 runs and `min_time`.
fn host_phases(
    items: &[RsaItem<'_>],
    recorded: &[Recorded],
    min_time: Duration,
) -> Result<HostRow, String> {
    let mut runs: Vec<RsaHostTimes> = Vec::new();
    let start = Instant::now();
    while runs.len() < 5 || start.elapsed() < min_time {
        let mut next = recorded.iter();
        let mut exec = |l: &Launch| -> Result<Vec<u32>, String> {
            let r = next.next().ok_or("more launches than recorded")?;
            if l.input != r.launch.input || l.msg_key != r.launch.msg_key {
                return Err("the launch differs from the recorded one".into());
            }
            Ok(r.output.clone())
        };
        let mut times = RsaHostTimes::default();
        seeded_run(items, &mut exec, &mut times)?;
        runs.push(times);
    }
    let per_msg = |f: fn(&RsaHostTimes) -> Duration| {
        let mut v: Vec<f64> = runs
            .iter()
            .map(|t| f(t).as_secs_f64() * 1e6 / items.len() as f64)
            .collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let host_us = per_msg(|t| t.host());
    Ok(HostRow {
        bits: 0,
        batch: items.len(),
        threads: rayon::current_num_threads(),
        runs: runs.len(),
        check_us: per_msg(|t| t.check),
        layout_us: per_msg(|t| t.layout),
        blind_us: per_msg(|t| t.blind),
        unblind_verify_us: per_msg(|t| t.unblind_verify),
        host_us,
        host_ops: 1e6 / host_us,
    })
}

fn print_host_row(r: &HostRow) {
    println!(
        "host RSA-{} x {} on {} core(s), us/msg ({} runs): check {:.2}, layout {:.2}, blind {:.2}, unblind+verify {:.2}; host {:.2} = {:.0} ops/s",
        r.bits,
        r.batch,
        r.threads,
        r.runs,
        r.check_us,
        r.layout_us,
        r.blind_us,
        r.unblind_verify_us,
        r.host_us,
        r.host_ops
    );
}

/// Seed 004's "mixed" scenario: requests of random sizes (1-10 small,
/// 100-300 large messages) under random keys, until `total` messages.
fn mixed_requests(keys: &[RsaPrivateKey], total: usize, seed: u64) -> Vec<(usize, Vec<u8>)> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut out = Vec::with_capacity(total);
    while out.len() < total {
        let k = (rng.next_u32() as usize) % keys.len();
        let size = if rng.next_u32() % 2 == 0 {
            1 + rng.next_u32() as usize % 10
        } else {
            100 + rng.next_u32() as usize % 201
        };
        let n = size.min(total - out.len());
        for m in messages(&keys[k], n, rng.next_u64()) {
            out.push((k, m));
        }
    }
    out
}

fn print_row(r: &Row) {
    let f = |v: Option<f64>| v.map_or("-".to_string(), |x| format!("{x:.0}"));
    if r.batch == 1 {
        println!(
            "RSA-{} ops/s  {:>6} {:>9} {:>9} {:>11} {:>9} {:>9} {:>11} {:>9}",
            r.bits,
            "batch",
            "cpu-1",
            "cpu-all",
            "openssl-all",
            "gpu",
            "gpu-x2",
            "gpu-kernel",
            "auto"
        );
    }
    println!(
        "             {:>6} {:>9} {:>9} {:>11} {:>9} {:>9} {:>11} {:>9}",
        r.batch,
        f(r.cpu_1_ops),
        f(r.cpu_all_ops),
        f(r.openssl_all_ops),
        f(r.gpu_ops),
        f(r.gpu_2_ops),
        f(r.gpu_kernel_ops),
        f(r.auto_ops)
    );
}

#[cfg(test)]
mod tests {
    use super::parse_openssl_speed;

    #[test]
    fn openssl_speed_output_parses() {
        // OpenSSL 3.0 with -multi: sign, verify, encrypt, decrypt columns.
        let v3 = "                   sign    verify    encrypt   decrypt   sign/s verify/s  encr./s  decr./s\n\
                  rsa  2048 bits 0.000024s 0.000001s 0.000001s 0.000024s  41012.3 1101022.0 1000000.0 40000.0\n";
        assert_eq!(parse_openssl_speed(v3, 2048), Some(41012.3));
        // OpenSSL 1.1: sign, verify only.
        let v1 = "rsa 1024 bits 0.000070s 0.000004s  14285.7 250000.0\n";
        assert_eq!(parse_openssl_speed(v1, 1024), Some(14285.7));
        assert_eq!(parse_openssl_speed(v1, 2048), None);
        assert_eq!(parse_openssl_speed("garbage", 2048), None);
    }
}
