//! `gvault bench checkpoint`: the checkpoint engine (`gvault_cas::
//! checkpoint::run`, what `gvault.checkpoint` calls) on a synthetic bf16
//! state dict with a 7B decoder's shapes: a first save, a second save with
//! a fraction of the tensors changed, and a load of it, checked bit for
//! bit. The device path keeps the tensors in GPU memory (layer i on GPU
//! i mod N) and seals them there; the host path keeps them in host memory.
//! Bounds from the same run: the device-to-host link (pinned) of each GPU
//! and the repository directory's write rate with 16 writers (packs are
//! written as 16 MiB-scale files, fsynced). `python/bench/checkpoint.py`
//! runs torch.save and safetensors beside the package on real tensors.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::{RngCore, SeedableRng};
use rayon::prelude::*;
use serde::Serialize;

use super::measure::{err, files_write_rate, gbps, median, memory_dir};
use gvault_accel::{AutoBackend, Backend, DeviceAllocation, DeviceCopy, GpuBackend};
use gvault_cas::checkpoint::{self, run, Source};
use gvault_cas::{Chunker, InitOptions, Repository};
use gvault_store::Encryption;

#[derive(clap::Args, Debug)]
pub struct CheckpointArgs {
    /// Checkpoint size, GiB of bf16 tensors [default: 20; --quick: 0.25].
    #[arg(long)]
    gib: Option<f64>,
    /// Directory the repositories go under [default: /dev/shm, else the
    /// temporary directory].
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Paths (comma separated): device (tensors in GPU memory, sealed on
    /// their GPU), host (tensors in host memory, the repository's
    /// accelerator) [default: both; device only where a GPU is present].
    #[arg(long, value_delimiter = ',')]
    paths: Vec<String>,
    /// GPU counts for the device path (comma separated).
    #[arg(long, value_delimiter = ',', default_value = "1")]
    gpus: Vec<usize>,
    /// Worker threads a GPU [default: the engine's choice].
    #[arg(long)]
    workers: Option<usize>,
    /// Fraction of the tensors changed before the second save.
    #[arg(long, default_value_t = 0.05)]
    changed: f64,
    /// Runs of each path; the median is reported.
    #[arg(long, default_value_t = 1)]
    repeat: usize,
    /// A small checkpoint for CI (seconds).
    #[arg(long)]
    quick: bool,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Also write the JSON report to this file.
    #[arg(long)]
    save: Option<PathBuf>,
}

/// One tensor group of the state dict: a segment of the checkpoint.
struct Segment {
    name: String,
    len: usize,
    /// Norm weights: bf16 ones (the same bytes in every layer).
    ones: bool,
}

/// A 7B decoder's state dict (hidden 4096, MLP 11008, vocabulary 32000;
/// below 2 GiB a quarter of each, so small runs still have many tensors),
/// as many layers as make `bytes`; each layer's two norms share a segment
/// (tiny tensors do in the package).
fn state_dict(bytes: u64) -> Vec<Segment> {
    let (hidden, mlp, vocab) = if bytes < 2 << 30 {
        (1024usize, 2752usize, 8000usize)
    } else {
        (4096, 11008, 32000)
    };
    let bf16 = 2;
    let embed = vocab * hidden * bf16;
    let per_layer = (4 * hidden * hidden + 3 * hidden * mlp + 2 * hidden) * bf16;
    let layers = ((bytes as usize).saturating_sub(2 * embed) / per_layer).max(1);
    let mut out = vec![Segment {
        name: "model.embed_tokens.weight".into(),
        len: embed,
        ones: false,
    }];
    for i in 0..layers {
        let p = format!("model.layers.{i}.");
        for n in ["q_proj", "k_proj", "v_proj", "o_proj"] {
            out.push(Segment {
                name: format!("{p}self_attn.{n}.weight"),
                len: hidden * hidden * bf16,
                ones: false,
            });
        }
        for n in ["gate_proj", "up_proj", "down_proj"] {
            out.push(Segment {
                name: format!("{p}mlp.{n}.weight"),
                len: hidden * mlp * bf16,
                ones: false,
            });
        }
        out.push(Segment {
            name: format!("{p}norms"),
            len: 2 * hidden * bf16,
            ones: true,
        });
    }
    out.push(Segment {
        name: "lm_head.weight".into(),
        len: embed,
        ones: false,
    });
    out
}

/// The layer a segment belongs to (its GPU is layer mod N); 0 otherwise.
fn layer_of(name: &str) -> usize {
    let mut parts = name.split('.');
    match (parts.next(), parts.next(), parts.next()) {
        (Some("model"), Some("layers"), Some(i)) => i.parse().unwrap_or(0),
        _ => 0,
    }
}

fn fill(seg: &Segment, seed: u64) -> Vec<u8> {
    if seg.ones {
        // bf16 1.0 is 0x3f80, little-endian.
        return [0x80u8, 0x3f].repeat(seg.len / 2);
    }
    let mut v = vec![0u8; seg.len];
    rand::rngs::StdRng::seed_from_u64(seed).fill_bytes(&mut v);
    v
}

/// Changes a tensor as a training step would touch it: one bf16 value in
/// every 4096.
fn touch(v: &mut [u8]) {
    for x in v.iter_mut().step_by(8192) {
        *x = x.wrapping_add(1);
    }
}

#[derive(Serialize, Clone, Debug)]
struct Row {
    path: String,
    gpus: usize,
    workers: Option<usize>,
    first_save_gbps: f64,
    second_save_gbps: f64,
    load_gbps: f64,
    second_bytes_new: u64,
    packs_sealed_on_device: u64,
    /// Seconds per step of each phase, summed over the workers (they
    /// overlap): where the time went.
    first_trace: run::Trace,
    second_trace: run::Trace,
    load_trace: run::Trace,
}

#[derive(Serialize)]
struct Report {
    checkpoint_bytes: u64,
    segments: usize,
    changed_bytes: u64,
    gpus_present: Vec<String>,
    /// Device-to-host link, page-locked, 256 MiB copies, per GPU.
    link_d2h_gbps: Vec<f64>,
    /// 16 writers of 16 MiB files (fsynced) in the repository directory.
    repo_write_gbps: f64,
    rows: Vec<Row>,
}

/// The checkpoint's segments where a path keeps them: host segments are
/// the generated data itself until a change replaces one.
enum Tensors<'a> {
    Host(Vec<Cow<'a, [u8]>>),
    Device(Vec<DeviceAllocation>),
}

/// Uninitialised GPU memory of `len` bytes on `device`.
fn alloc(backend: &dyn Backend, device: u32, len: usize) -> Result<DeviceAllocation, String> {
    backend
        .alloc_on_device(device, len.max(1))
        .ok_or("no GPU")?
        .map_err(err("device allocation"))
}

fn copy(backend: &dyn Backend, device: u32, c: DeviceCopy) -> Result<(), String> {
    // SAFETY: every copy is between a live allocation of this run and a
    // live host buffer of at least `len` bytes, and nothing else touches
    // either meanwhile.
    match unsafe { backend.copy_device(device, &[c]) } {
        Some(r) => r.map_err(err("device copy")),
        None => Err("no GPU".into()),
    }
}

impl Tensors<'_> {
    /// Buffers of the same sizes in the same places, for a load.
    fn empty_like(&self, backend: &dyn Backend) -> Result<Tensors<'static>, String> {
        Ok(match self {
            Tensors::Host(v) => {
                Tensors::Host(v.iter().map(|b| vec![0u8; b.len()].into()).collect())
            }
            Tensors::Device(v) => Tensors::Device(
                v.iter()
                    .map(|a| {
                        let dev = a.slice(0, a.len()).ok_or("empty allocation")?.device();
                        alloc(backend, dev, a.len())
                    })
                    .collect::<Result<_, String>>()?,
            ),
        })
    }

    fn sources(&self) -> Result<Vec<Source>, String> {
        match self {
            Tensors::Host(v) => Ok(v
                .iter()
                .map(|b| Source::Host {
                    ptr: b.as_ptr() as usize,
                    len: b.len(),
                })
                .collect()),
            Tensors::Device(v) => v
                .iter()
                .map(|a| {
                    a.slice(0, a.len())
                        .map(Source::Device)
                        .ok_or_else(|| "empty device allocation".to_string())
                })
                .collect(),
        }
    }

    /// Replaces segment `i` with `bytes`.
    fn set(&mut self, backend: &dyn Backend, i: usize, bytes: &[u8]) -> Result<(), String> {
        match self {
            Tensors::Host(v) => v[i] = Cow::Owned(bytes.to_vec()),
            Tensors::Device(v) => {
                let s = v[i].slice(0, bytes.len()).ok_or("segment size")?;
                copy(
                    backend,
                    s.device(),
                    DeviceCopy {
                        dst: s.ptr(),
                        src: bytes.as_ptr() as u64,
                        len: bytes.len(),
                    },
                )?;
            }
        }
        Ok(())
    }

    /// Whether segment `i` holds `want` (a device segment is read back).
    fn holds(&self, backend: &dyn Backend, i: usize, want: &[u8]) -> Result<bool, String> {
        match self {
            Tensors::Host(v) => Ok(*v[i] == *want),
            Tensors::Device(v) => {
                let mut out = vec![0u8; v[i].len()];
                let s = v[i].slice(0, out.len()).ok_or("segment size")?;
                copy(
                    backend,
                    s.device(),
                    DeviceCopy {
                        dst: out.as_mut_ptr() as u64,
                        src: s.ptr(),
                        len: out.len(),
                    },
                )?;
                Ok(out == want)
            }
        }
    }
}

/// The segments `data` in host memory, or on GPUs (segment i on GPU
/// `gpus[i]`).
fn place<'a>(
    backend: &dyn Backend,
    data: &'a [Vec<u8>],
    gpus: Option<&[u32]>,
) -> Result<Tensors<'a>, String> {
    let Some(gpus) = gpus else {
        return Ok(Tensors::Host(
            data.iter().map(|d| Cow::Borrowed(&d[..])).collect(),
        ));
    };
    let out = data
        .iter()
        .zip(gpus)
        .map(|(d, &dev)| alloc(backend, dev, d.len()))
        .collect::<Result<_, String>>()?;
    let mut t = Tensors::Device(out);
    for (i, d) in data.iter().enumerate() {
        t.set(backend, i, d)?;
    }
    Ok(t)
}

struct Run<'a> {
    backend: &'a Arc<dyn Backend>,
    base: &'a Path,
    manifest: &'a [u8],
    data: &'a [Vec<u8>],
    /// Each segment's layer (its GPU is the layer mod the GPU count).
    layers: &'a [usize],
    changed: &'a [(usize, Vec<u8>)],
    opts: run::Options,
}

impl Run<'_> {
    fn once(&self, path: &str, gpus: usize) -> Result<Row, String> {
        let backend = &**self.backend;
        let dir = self
            .base
            .join(format!("gvault-bench-ckpt-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let enc = Encryption::with_key(gvault_store::keys::generate_key());
        let opts = InitOptions {
            chunker: Chunker::DEFAULT,
            compression: false,
        };
        let repo = Arc::new(
            Repository::init(&dir, &enc, opts, self.backend.clone()).map_err(err("repository"))?,
        );
        let by_layer: Vec<u32> = self
            .layers
            .iter()
            .map(|l| (l % gpus.max(1)) as u32)
            .collect();
        let mut tensors = place(
            backend,
            self.data,
            (path == "device").then_some(&by_layer[..]),
        )?;
        let r = self.measure(&repo, backend, &mut tensors, path, gpus);
        drop(repo);
        let _ = std::fs::remove_dir_all(&dir);
        r
    }

    fn measure(
        &self,
        repo: &Arc<Repository>,
        backend: &dyn Backend,
        tensors: &mut Tensors<'_>,
        path: &str,
        gpus: usize,
    ) -> Result<Row, String> {
        let total: u64 = self.data.iter().map(|d| d.len() as u64).sum();
        let save = |tensors: &Tensors, name: &str| -> Result<(run::Saved, Duration), String> {
            let mut sources = vec![Source::Host {
                ptr: self.manifest.as_ptr() as usize,
                len: self.manifest.len(),
            }];
            sources.extend(tensors.sources()?);
            let t = Instant::now();
            // SAFETY: every source is a live buffer of this run, unchanged
            // until the save returns.
            let saved = unsafe { run::save(repo, backend, name, &sources, &self.opts) }
                .map_err(err("save"))?;
            Ok((saved, t.elapsed()))
        };
        let (first, t1) = save(tensors, "bench")?;
        for (i, bytes) in self.changed {
            tensors.set(backend, *i, bytes)?;
        }
        let (second, t2) = save(tensors, "bench")?;

        let opened = checkpoint::open(repo, &second.snapshot).map_err(err("open"))?;
        if opened.manifest != self.manifest {
            return Err("the loaded manifest differs from the saved one".into());
        }
        let out = tensors.empty_like(backend)?;
        let targets = out.sources()?;
        let t = Instant::now();
        // SAFETY: distinct live buffers of each segment's length, untouched
        // until the load returns.
        let (load_trace, _) = unsafe { run::load(repo, backend, &opened, &targets, &self.opts) }
            .map_err(err("load"))?;
        let t3 = t.elapsed();
        // Bit for bit: every segment against what was saved second.
        for i in 0..self.data.len() {
            let want = self
                .changed
                .iter()
                .find(|(c, _)| *c == i)
                .map_or(&self.data[i], |(_, b)| b);
            if !out.holds(backend, i, want)? {
                return Err(format!("segment {i} loaded differs from the one saved"));
            }
        }
        Ok(Row {
            path: path.into(),
            gpus: if path == "device" { gpus } else { 0 },
            workers: self.opts.workers_per_gpu,
            first_save_gbps: gbps(total, t1),
            second_save_gbps: gbps(total, t2),
            load_gbps: gbps(total, t3),
            second_bytes_new: second.stats.bytes_new,
            packs_sealed_on_device: first.stats.packs_sealed_on_device,
            first_trace: first.trace,
            second_trace: second.trace,
            load_trace,
        })
    }
}

/// The median run by first-save rate, with each rate the median of its
/// own column.
fn median_row(mut runs: Vec<Row>) -> Row {
    let first = median(runs.iter().map(|r| r.first_save_gbps).collect());
    let second = median(runs.iter().map(|r| r.second_save_gbps).collect());
    let load = median(runs.iter().map(|r| r.load_gbps).collect());
    runs.sort_by(|a, b| a.first_save_gbps.total_cmp(&b.first_save_gbps));
    let mut row = runs.swap_remove(runs.len() / 2);
    (row.first_save_gbps, row.second_save_gbps, row.load_gbps) = (first, second, load);
    row
}

fn print_row(r: &Row, bounds: &Report) {
    let what = if r.path == "device" {
        format!("device, {} GPU(s)", r.gpus)
    } else {
        "host".to_string()
    };
    let top = |t: &run::Trace| {
        let mut v: Vec<_> = t.iter().collect();
        v.sort_by(|a, b| b.1.total_cmp(a.1));
        v.iter()
            .take(3)
            .map(|(k, s)| format!("{k} {s:.2}s"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    println!(
        "{what:<20} first save {:>7.2}  second save {:>7.2}  load {:>7.2} GB/s  (second: {:.1} MB new; repository writes {:.1} GB/s)",
        r.first_save_gbps,
        r.second_save_gbps,
        r.load_gbps,
        r.second_bytes_new as f64 / 1e6,
        bounds.repo_write_gbps
    );
    println!(
        "{:<20} first save: {}; load: {}",
        "",
        top(&r.first_trace),
        top(&r.load_trace)
    );
}

pub fn run(args: CheckpointArgs) -> Result<(), String> {
    let gib = args.gib.unwrap_or(if args.quick { 0.25 } else { 20.0 });
    if gib.is_nan() || gib <= 0.0 || !(0.0..=1.0).contains(&args.changed) || args.repeat == 0 {
        return Err("--gib must be > 0, --changed in 0..1, --repeat >= 1".into());
    }
    let base = args.dir.clone().unwrap_or_else(memory_dir);
    let gpu = GpuBackend::probe().ok();
    let gpu_names: Vec<String> = gpu
        .as_ref()
        .map(|g| g.devices().iter().map(|d| d.name.clone()).collect())
        .unwrap_or_default();
    let mut paths = args.paths.clone();
    if paths.is_empty() {
        paths = if gpu_names.is_empty() {
            vec!["host".into()]
        } else {
            vec!["device".into(), "host".into()]
        };
    }
    for p in &paths {
        match p.as_str() {
            "host" => {}
            "device" if gpu_names.is_empty() => {
                return Err("the device path needs a GPU; none was found".into())
            }
            "device" => {}
            other => return Err(format!("unknown path {other} (device, host)")),
        }
    }
    if let Some(&n) = args
        .gpus
        .iter()
        .find(|&&n| n == 0 || n > gpu_names.len().max(1))
    {
        if paths.iter().any(|p| p == "device") {
            return Err(format!(
                "--gpus {n}: this machine has {} GPU(s)",
                gpu_names.len()
            ));
        }
    }
    let link_d2h_gbps: Vec<f64> = gpu
        .as_ref()
        .map(|g| {
            g.devices()
                .iter()
                .filter_map(|d| gvault_accel::measure_link(d, &[256 << 20], 5).ok())
                .map(|figs| {
                    figs.iter()
                        .filter(|f| f.pinned && !f.to_device)
                        .map(|f| f.gbps)
                        .fold(0.0, f64::max)
                })
                .collect()
        })
        .unwrap_or_default();
    drop(gpu);

    let segs = state_dict((gib * (1u64 << 30) as f64) as u64);
    let data: Vec<Vec<u8>> = segs
        .par_iter()
        .enumerate()
        .map(|(i, s)| fill(s, i as u64))
        .collect();
    let layers: Vec<usize> = segs.iter().map(|s| layer_of(&s.name)).collect();
    let step = (1.0 / args.changed.max(1e-9)).round().max(1.0) as usize;
    let changed: Vec<(usize, Vec<u8>)> = if args.changed == 0.0 {
        Vec::new()
    } else {
        (0..data.len())
            .step_by(step)
            .map(|i| {
                let mut v = data[i].clone();
                touch(&mut v);
                (i, v)
            })
            .collect()
    };
    let manifest = serde_json::to_vec(
        &segs
            .iter()
            .map(|s| (s.name.as_str(), s.len))
            .collect::<Vec<_>>(),
    )
    .map_err(err("manifest"))?;
    let total: u64 = data.iter().map(|d| d.len() as u64).sum();
    // The repository's memory touched once before any figure (in a VM,
    // first-touched pages cost far more than reused ones).
    files_write_rate(&base, 16, total + total / 8)?;
    let repo_write_gbps = files_write_rate(&base, 16, total.min(4 << 30))?;
    let mut report = Report {
        checkpoint_bytes: total,
        segments: segs.len(),
        changed_bytes: changed.iter().map(|(_, v)| v.len() as u64).sum(),
        gpus_present: gpu_names,
        link_d2h_gbps,
        repo_write_gbps,
        rows: Vec::new(),
    };
    if !args.json {
        println!(
            "checkpoint: {:.2} GB in {} segments, {:.2} GB changed before the second save; repository under {} writes {:.1} GB/s (16 writers); link device-to-host {:?} GB/s",
            total as f64 / 1e9,
            segs.len(),
            report.changed_bytes as f64 / 1e9,
            base.display(),
            repo_write_gbps,
            report.link_d2h_gbps
        );
    }
    let backend: Arc<dyn Backend> = AutoBackend::shared();
    let runner = Run {
        backend: &backend,
        base: &base,
        manifest: &manifest,
        data: &data,
        layers: &layers,
        changed: &changed,
        opts: run::Options {
            workers_per_gpu: args.workers,
        },
    };
    for p in &paths {
        let counts: Vec<usize> = if p == "device" {
            args.gpus.clone()
        } else {
            vec![1]
        };
        for &n in &counts {
            let mut runs = Vec::new();
            for _ in 0..args.repeat {
                runs.push(runner.once(p, n)?);
            }
            let row = median_row(runs);
            if !args.json {
                print_row(&row, &report);
            }
            report.rows.push(row);
        }
    }
    let text = serde_json::to_string_pretty(&report).map_err(err("report"))?;
    if args.json {
        println!("{text}");
    }
    if let Some(p) = &args.save {
        std::fs::write(p, &text).map_err(err("writing the report"))?;
    }
    Ok(())
}
