//! `gvault bench seed001`: seed 001's (HashGPU) sweeps. Sliding-window MD5
//! (Fig. 14: a 20-byte window every 4 bytes) and the parallel Merkle-Damgård
//! direct hashing (Fig. 4's "direct hashing"), over data sizes, on one core
//! (the seed's baseline), all cores, the GPU end to end (host memory in,
//! matches / digest out) and the GPU on device-resident input (the kernels
//! plus a launch's fixed costs: pattern upload, synchronisation, results).
//! Each GPU result is checked against the CPU's before it is reported.

use std::time::{Duration, Instant};

use gvault_accel::seed001::{pmd_digest, window_matches, window_md5, PmdHash, WindowParams};
use gvault_accel::Data;
use gvault_accel::GpuBackend;
use serde::Serialize;

use super::measure::{gbps, parse_nonzero_size, repeat, size_label};
use super::primitive::random;

#[derive(clap::Args, Debug)]
pub struct Seed001Args {
    /// Sizes 1 MiB and 64 MiB only, shorter timing.
    #[arg(long)]
    quick: bool,
    /// Data sizes (default 64 KiB to 256 MiB, powers of 4).
    #[arg(long, value_delimiter = ',')]
    sizes: Option<Vec<String>>,
    /// Sliding window bytes (the seed: 20).
    #[arg(long, default_value_t = 20)]
    window: u32,
    /// Offset between windows (the seed: 4).
    #[arg(long, default_value_t = 4)]
    step: u32,
    /// Block size of the parallel Merkle-Damgård digest.
    #[arg(long, default_value = "4KiB")]
    block: String,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct Row {
    op: String,
    bytes: usize,
    cpu_1_gbps: f64,
    cpu_all_gbps: f64,
    gpu_gbps: Option<f64>,
    gpu_kernel_gbps: Option<f64>,
}

pub fn run(args: Seed001Args) -> Result<(), String> {
    let params = WindowParams::new(args.window, args.step).map_err(|e| e.to_string())?;
    let block = u32::try_from(parse_nonzero_size(&args.block, "--block")?)
        .map_err(|_| format!("block {} is too large", args.block))?;
    let sizes: Vec<usize> = match &args.sizes {
        Some(s) => s
            .iter()
            .map(|s| parse_nonzero_size(s, "--sizes"))
            .collect::<Result<_, _>>()?,
        None if args.quick => vec![1 << 20, 64 << 20],
        None => (0..=6).map(|k| (64 << 10) << (2 * k)).collect(),
    };
    let min_time = Duration::from_millis(if args.quick { 200 } else { 1000 });
    let one = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .map_err(|e| e.to_string())?;
    let all = rayon::ThreadPoolBuilder::new()
        .build()
        .map_err(|e| e.to_string())?;
    let gpu = match GpuBackend::probe() {
        Ok(g) => Some(g),
        Err(why) => {
            eprintln!("no GPU ({why}): CPU columns only");
            None
        }
    };
    let time = |f: &mut dyn FnMut()| {
        repeat(3, min_time, || {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .median
    };
    let pmd_name = format!("{}/{}", PmdHash::Md5.name(), size_label(block as usize));
    let sw_name = format!("sliding-md5/{}+{}", params.window(), params.step());
    let mut rows = Vec::new();
    for &n in &sizes {
        let data = random(n);
        // Patterns: a window of the data (so matches exist) and random ones.
        let mut patterns: Vec<[u8; 16]> = window_md5(&params, &data, (n / 2) & !3)
            .into_iter()
            .collect();
        patterns.extend((0..7).map(|i| [i as u8 ^ 0x5A; 16]));

        let want = all.install(|| window_matches(&params, &data, &patterns));
        let cpu1 = time(&mut || {
            one.install(|| window_matches(&params, &data, &patterns));
        });
        let cpu_all = time(&mut || {
            all.install(|| window_matches(&params, &data, &patterns));
        });
        let (gpu_t, kernel_t) = match &gpu {
            Some(g) => {
                let check = |got: Result<Vec<u64>, _>| match got {
                    Ok(v) if v == want => Ok(()),
                    Ok(_) => Err(format!(
                        "{sw_name} {n} bytes: GPU offsets differ from the CPU's"
                    )),
                    Err(e) => Err(format!("{sw_name} {n} bytes: {e}")),
                };
                check(g.window_matches(&params, Data::Host(&data), &patterns))?;
                let alloc = g.alloc_device(0, n, &data).map_err(|e| e.to_string())?;
                let slice = Data::Device(alloc.slice(0, n).expect("in bounds"));
                check(g.window_matches(&params, slice, &patterns))?;
                let e2e = time(&mut || {
                    let _ = g.window_matches(&params, Data::Host(&data), &patterns);
                });
                let kernel = time(&mut || {
                    let _ = g.window_matches(&params, slice, &patterns);
                });
                (Some(e2e), Some(kernel))
            }
            None => (None, None),
        };
        rows.push(row(&sw_name, n, cpu1, cpu_all, gpu_t, kernel_t));

        let want = pmd_digest(PmdHash::Md5, block, &data).map_err(|e| e.to_string())?;
        let cpu1 = time(&mut || {
            let _ = one.install(|| pmd_digest(PmdHash::Md5, block, &data));
        });
        let cpu_all = time(&mut || {
            let _ = all.install(|| pmd_digest(PmdHash::Md5, block, &data));
        });
        let (gpu_t, kernel_t) = match &gpu {
            Some(g) => {
                let check = |got: Result<_, _>| match got {
                    Ok(d) if d == want => Ok(()),
                    Ok(_) => Err(format!("{pmd_name} {n} bytes: GPU digest differs")),
                    Err(e) => Err(format!("{pmd_name} {n} bytes: {e}")),
                };
                check(g.pmd_digest(PmdHash::Md5, block, Data::Host(&data)))?;
                let alloc = g.alloc_device(0, n, &data).map_err(|e| e.to_string())?;
                let slice = Data::Device(alloc.slice(0, n).expect("in bounds"));
                check(g.pmd_digest(PmdHash::Md5, block, slice))?;
                let e2e = time(&mut || {
                    let _ = g.pmd_digest(PmdHash::Md5, block, Data::Host(&data));
                });
                let kernel = time(&mut || {
                    let _ = g.pmd_digest(PmdHash::Md5, block, slice);
                });
                (Some(e2e), Some(kernel))
            }
            None => (None, None),
        };
        rows.push(row(&pmd_name, n, cpu1, cpu_all, gpu_t, kernel_t));
    }
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&rows).map_err(|e| e.to_string())?
        );
        return Ok(());
    }
    println!(
        "seed 001: GB/s (median); x = speed-up over one core (the seed's baseline); {} cores",
        all.current_num_threads()
    );
    println!(
        "{:<22} {:>8} {:>9} {:>16} {:>16} {:>16}",
        "op", "size", "cpu-1", "cpu-all", "gpu e2e", "gpu resident"
    );
    let cell = |v: Option<f64>, base: f64| match v {
        Some(v) => format!("{v:.3} ({:.1}x)", v / base),
        None => "-".into(),
    };
    for r in &rows {
        println!(
            "{:<22} {:>8} {:>9.3} {:>16} {:>16} {:>16}",
            r.op,
            size_label(r.bytes),
            r.cpu_1_gbps,
            cell(Some(r.cpu_all_gbps), r.cpu_1_gbps),
            cell(r.gpu_gbps, r.cpu_1_gbps),
            cell(r.gpu_kernel_gbps, r.cpu_1_gbps)
        );
    }
    Ok(())
}

fn row(
    op: &str,
    n: usize,
    cpu1: Duration,
    cpu_all: Duration,
    gpu: Option<Duration>,
    kernel: Option<Duration>,
) -> Row {
    let g = |t: Duration| gbps(n as u64, t);
    Row {
        op: op.to_string(),
        bytes: n,
        cpu_1_gbps: g(cpu1),
        cpu_all_gbps: g(cpu_all),
        gpu_gbps: gpu.map(g),
        gpu_kernel_gbps: kernel.map(g),
    }
}
