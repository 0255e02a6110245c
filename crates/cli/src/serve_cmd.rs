//! `gvault serve`: the daemon that shares this machine's accelerators with
//! every process (gvault-service), and `gvault serve status`.

use std::path::PathBuf;
use std::sync::Arc;

use gvault_accel::{AutoBackend, Backend, CpuBackend};
use gvault_service::{Access, Daemon, ServeConfig, ServiceBackend};

use crate::bench::measure::parse_nonzero_size;

#[derive(clap::Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct ServeArgs {
    #[command(subcommand)]
    action: Option<ServeAction>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(clap::Subcommand, Debug)]
enum ServeAction {
    /// Show a running daemon's clients, queues, batch sizes, bytes per op
    /// and GPU use.
    Status(StatusArgs),
}

#[derive(clap::Args, Debug)]
struct StatusArgs {
    /// The daemon's socket [default: $XDG_RUNTIME_DIR/gvault.sock].
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// Print the daemon's JSON report.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args, Debug)]
struct RunArgs {
    /// The socket to listen on [default: $XDG_RUNTIME_DIR/gvault.sock];
    /// under systemd socket activation, the socket systemd passes.
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// Also let this group (name or number) use the daemon (socket mode
    /// 0660 instead of 0600).
    #[arg(long, value_name = "G")]
    group: Option<String>,
    /// Run every request as its own job (for comparison: batching is what
    /// makes many small requests cheap).
    #[arg(long)]
    no_batching: bool,
    /// Requests of at most this size are batched across clients.
    #[arg(long, value_name = "SIZE", default_value = "256K")]
    batch_small: String,
    /// Worker threads running jobs [default: one per core, 2 to 32].
    #[arg(long, value_name = "N")]
    workers: Option<usize>,
    /// Most jobs of small requests of one op at once; its other small
    /// requests wait and batch [default: no bound; 2 a GPU with --accel
    /// gpu, where one launch for many requests costs about what one for a
    /// single request does]. Large requests are not held back.
    #[arg(long, value_name = "N")]
    op_jobs: Option<usize>,
    /// Shared memory one client may hold.
    #[arg(long, value_name = "SIZE", default_value = "4G")]
    client_memory: String,
    /// Requests one client may have in flight.
    #[arg(long, value_name = "N", default_value_t = 256)]
    client_queue: u32,
    /// Most clients at once.
    #[arg(long, value_name = "N", default_value_t = 1024)]
    max_clients: usize,
    /// The accelerators the daemon runs jobs on: auto (every core and GPU,
    /// by the calibrated cost model), cpu, or gpu (every job on the GPU, as
    /// seed 004's service ran; fails without a usable GPU).
    #[arg(long, value_name = "A", default_value = "auto", value_parser = ["auto", "cpu", "gpu"])]
    accel: String,
    /// Log each connection and refusal to stderr.
    #[arg(long, short)]
    verbose: bool,
}

pub fn run(args: ServeArgs) -> Result<(), String> {
    match args.action {
        Some(ServeAction::Status(s)) => status(s),
        None => serve(args.run),
    }
}

fn status(args: StatusArgs) -> Result<(), String> {
    let socket = args.socket.unwrap_or_else(gvault_service::default_socket);
    let b =
        ServiceBackend::connect(&socket).map_err(|e| format!("no gvault service answers: {e}"))?;
    let json = b.status()?;
    if args.json {
        println!("{json}");
        return Ok(());
    }
    let v: serde_json::Value =
        serde_json::from_str(&json).map_err(|e| format!("the daemon's status is not JSON: {e}"))?;
    print!("{}", render(&v));
    Ok(())
}

/// The status report as text.
fn render(v: &serde_json::Value) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let n = |v: &serde_json::Value| v.as_u64().unwrap_or(0);
    let gb = |b: u64| b as f64 / 1e9;
    let _ = writeln!(
        out,
        "gvault service pid {} on {}, up {:.0} s, protocol {}",
        n(&v["pid"]),
        v["socket"].as_str().unwrap_or("?"),
        v["uptime_s"].as_f64().unwrap_or(0.0),
        n(&v["version"])
    );
    let c = &v["config"];
    let _ = writeln!(
        out,
        "{} workers, batching {}, {} connections accepted, {} refused",
        n(&c["workers"]),
        if c["batching"].as_bool() == Some(true) {
            "on"
        } else {
            "off"
        },
        n(&v["accepted"]),
        n(&v["refused"])
    );
    let clients = v["clients"].as_array().cloned().unwrap_or_default();
    let _ = writeln!(out, "\nclients: {}", clients.len());
    if !clients.is_empty() {
        let _ = writeln!(
            out,
            "{:>5} {:>8} {:>6} {:>10} {:>10} {:>9} {:>8} {:>10} {:>5}",
            "id", "pid", "uid", "requests", "GB", "in-flight", "buffers", "buffer MB", "keys"
        );
        for c in &clients {
            let _ = writeln!(
                out,
                "{:>5} {:>8} {:>6} {:>10} {:>10.3} {:>9} {:>8} {:>10.1} {:>5}",
                n(&c["id"]),
                n(&c["pid"]),
                n(&c["uid"]),
                n(&c["requests"]),
                gb(n(&c["bytes"])),
                n(&c["in_flight"]),
                n(&c["buffers"]),
                n(&c["buffer_bytes"]) as f64 / 1e6,
                n(&c["keys"])
            );
        }
    }
    let ops = v["ops"].as_array().cloned().unwrap_or_default();
    let _ = writeln!(out, "\nops:");
    if ops.is_empty() {
        let _ = writeln!(out, "  none yet");
    } else {
        let _ = writeln!(
            out,
            "{:<16} {:>7} {:>10} {:>9} {:>10} {:>10} {:>8} {:>8}",
            "op", "queued", "requests", "jobs", "mean batch", "max batch", "GB", "busy s"
        );
        for o in &ops {
            let _ = writeln!(
                out,
                "{:<16} {:>7} {:>10} {:>9} {:>10.1} {:>10} {:>8.3} {:>8.2}",
                o["op"].as_str().unwrap_or("?"),
                n(&o["queued"]),
                n(&o["requests"]),
                n(&o["jobs"]),
                o["mean_batch"].as_f64().unwrap_or(0.0),
                n(&o["largest_batch"]),
                gb(n(&o["bytes"])),
                o["busy_s"].as_f64().unwrap_or(0.0)
            );
        }
    }
    let b = &v["backend"];
    if b["name"] == "auto" {
        let _ = writeln!(
            out,
            "\nbackend: auto, {} CPU threads, GPU {}; jobs cpu {} / gpu {} / split {} ({} explored); GB cpu {:.3} / gpu {:.3}; {} learned factors",
            n(&b["cpu_threads"]),
            match (b["gpu"].as_bool(), b["gpu_started"].as_bool()) {
                (Some(true), Some(true)) => "in use",
                (Some(true), _) => "present, not opened yet",
                _ => "none",
            },
            n(&b["jobs"]["cpu"]),
            n(&b["jobs"]["gpu"]),
            n(&b["jobs"]["split"]),
            n(&b["jobs"]["explored"]),
            gb(n(&b["bytes"]["cpu"])),
            gb(n(&b["bytes"]["gpu"])),
            b["learned"].as_array().map_or(0, Vec::len)
        );
    } else {
        let _ = writeln!(out, "\nbackend: {}", b["name"].as_str().unwrap_or("?"));
    }
    out
}

/// A group name or number as a gid (names from /etc/group).
fn group_id(g: &str) -> Result<u32, String> {
    if let Ok(n) = g.parse() {
        return Ok(n);
    }
    let groups = std::fs::read_to_string("/etc/group")
        .map_err(|e| format!("--group {g}: cannot read /etc/group: {e}"))?;
    groups
        .lines()
        .find_map(|l| {
            let mut f = l.split(':');
            (f.next() == Some(g)).then(|| f.nth(1)?.parse().ok())?
        })
        .ok_or_else(|| format!("--group {g}: no such group"))
}

fn serve(args: RunArgs) -> Result<(), String> {
    let socket = args.socket.unwrap_or_else(gvault_service::default_socket);
    let mut config = ServeConfig::new(socket.clone());
    if let Some(g) = &args.group {
        config.access = Access::with_group(group_id(g)?);
    }
    config.batch.enabled = !args.no_batching;
    config.batch.small_bytes = parse_nonzero_size(&args.batch_small, "--batch-small")? as u64;
    if let Some(w) = args.workers {
        if w == 0 {
            return Err("--workers must be at least 1".into());
        }
        config.workers = w;
    }
    config.batch.per_op = match args.op_jobs {
        Some(0) => return Err("--op-jobs must be at least 1".into()),
        Some(n) => n,
        None => usize::MAX,
    };
    config.limits.client_memory =
        parse_nonzero_size(&args.client_memory, "--client-memory")? as u64;
    if args.client_queue == 0 || args.max_clients == 0 {
        return Err("--client-queue and --max-clients must be at least 1".into());
    }
    config.limits.client_queue = args.client_queue;
    config.max_clients = args.max_clients;
    config.verbose = args.verbose;
    // Before anything starts a thread: it clears the activation variables.
    let activated = gvault_service::systemd_listener();
    let (backend, auto): (Arc<dyn Backend>, _) = match args.accel.as_str() {
        "cpu" => (CpuBackend::shared(), None),
        "gpu" => {
            let g = gvault_accel::GpuBackend::probe()
                .map_err(|why| format!("--accel gpu: no usable GPU: {why}"))?;
            if args.op_jobs.is_none() {
                // Two jobs of an op per GPU: one running, one being staged.
                config.batch.per_op = 2 * g.devices().len();
            }
            (Arc::new(g), None)
        }
        _ => {
            let a = AutoBackend::shared();
            (a.clone(), Some(a))
        }
    };
    let daemon = match activated {
        Some(l) => Daemon::from_listener(config, backend, auto.clone(), l),
        None => Daemon::bind(config, backend, auto.clone())
            .map_err(|e| format!("cannot listen on {}: {e}", socket.display()))?,
    };
    let handle = daemon.handle();
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
    ])
    .map_err(|e| format!("cannot handle signals: {e}"))?;
    {
        let handle = handle.clone();
        std::thread::Builder::new()
            .name("gvault-serve-signals".into())
            .spawn(move || {
                let mut forever = signals.forever();
                if let Some(sig) = forever.next() {
                    eprintln!("gvault serve: signal {sig}: finishing running jobs, then exiting");
                    handle.shutdown();
                }
                if let Some(sig) = forever.next() {
                    eprintln!("gvault serve: signal {sig} again: exiting now");
                    std::process::exit(1);
                }
            })
            .map_err(|e| format!("cannot start the signal thread: {e}"))?;
    }
    let gpu = match &auto {
        Some(a) if a.has_gpu() => "auto (CPU and GPU)",
        Some(_) => "auto (CPU only: no usable GPU)",
        None => args.accel.as_str(),
    };
    eprintln!(
        "gvault serve: listening on {} (pid {}), accelerators: {gpu}",
        daemon.socket().display(),
        std::process::id()
    );
    daemon.run().map_err(|e| format!("serve: {e}"))?;
    eprintln!("gvault serve: stopped");
    Ok(())
}

/// A running daemon as a benchmark's backend: the socket of
/// `GVAULT_ACCEL=service:SOCKET`, else the default one; no fallback (a
/// benchmark of the service must measure the service).
pub fn running_service(what: &str) -> Result<Arc<dyn Backend>, String> {
    let socket = std::env::var("GVAULT_ACCEL")
        .ok()
        .and_then(|s| gvault_service::socket_from_spec(&s))
        .unwrap_or_else(gvault_service::default_socket);
    let b = ServiceBackend::connect(&socket)
        .map_err(|e| format!("{what}: no gvault service answers ({e}); start `gvault serve`"))?;
    Ok(Arc::new(b))
}
