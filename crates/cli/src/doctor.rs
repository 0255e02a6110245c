//! `gvault doctor`: what this machine offers gvault. `--kernels` compiles
//! every kernel with NVRTC (no GPU needed) and fails if any fails.

use gvault_accel::auto::{self, machine_identity, CpuThreads};
use gvault_accel::cpu_info;
use gvault_accel::{compile_kernel, nvrtc_version, GpuBackend, KERNEL_SOURCES};

#[derive(clap::Args, Debug)]
pub struct DoctorArgs {
    /// Only compile every kernel for sm_90 with NVRTC (works without a GPU).
    #[arg(long)]
    kernels: bool,
    /// Only list every GVAULT_* setting (docs/tuning.md), with the values set here.
    #[arg(long, conflicts_with = "kernels")]
    settings: bool,
}

pub fn run(args: DoctorArgs) -> Result<(), String> {
    if args.kernels {
        return compile_kernels("sm_90");
    }
    if args.settings {
        print_settings();
        return Ok(());
    }
    let cpu = cpu_info();
    println!("gvault {}", env!("CARGO_PKG_VERSION"));
    println!("cpu: {} logical cores", cpu.logical_cores);
    for (name, present) in &cpu.features {
        println!("  {:<44} {}", name, if *present { "yes" } else { "no" });
    }
    match nvrtc_version() {
        Some((a, b)) => println!("nvrtc: {a}.{b}"),
        None => println!("nvrtc: not found"),
    }
    let gpu = GpuBackend::probe();
    match &gpu {
        Ok(g) => {
            for d in g.devices() {
                println!(
                    "gpu {}: {} (sm_{}{}), {} SMs; all kernels compiled and loaded",
                    d.ordinal,
                    d.name,
                    d.compute_capability.0,
                    d.compute_capability.1,
                    d.multiprocessors
                );
            }
        }
        Err(why) => println!("gpu: unavailable ({why}); every op runs on the CPU backend"),
    }
    print_service();
    let identity = machine_identity(gpu.as_ref().ok());
    let (model, source) = auto::load(auto::default_path().as_deref(), &identity);
    let threads = CpuThreads::from_env().resolve(cpu.logical_cores);
    println!("\ncost model (auto backend): {source}");
    crate::bench::calibrate::print_model(&model, threads);
    Ok(())
}

/// Whether a `gvault serve` answers on the default socket (or the one
/// `GVAULT_ACCEL=service:SOCKET` names), and what it serves.
fn print_service() {
    let socket = std::env::var("GVAULT_ACCEL")
        .ok()
        .and_then(|s| gvault_service::socket_from_spec(&s))
        .unwrap_or_else(gvault_service::default_socket);
    let status = gvault_service::ServiceBackend::connect(&socket).and_then(|b| b.status());
    match status
        .and_then(|s| serde_json::from_str::<serde_json::Value>(&s).map_err(|e| e.to_string()))
    {
        Ok(v) => println!(
            "service: gvault serve (pid {}) on {}: {} clients, backend {}",
            v["pid"],
            socket.display(),
            v["clients"].as_array().map_or(0, Vec::len),
            v["backend"]["name"].as_str().unwrap_or("?")
        ),
        Err(_) => println!(
            "service: none on {} (`gvault serve` shares the accelerators between processes)",
            socket.display()
        ),
    }
}

fn compile_kernels(arch: &'static str) -> Result<(), String> {
    let (a, b) = nvrtc_version()
        .ok_or("NVRTC (libnvrtc.so.13) not found: install nvidia-cuda-nvrtc==13.0.88")?;
    println!("nvrtc {a}.{b}, target {arch}");
    let mut failed = 0;
    for src in KERNEL_SOURCES {
        match compile_kernel(src, arch) {
            Ok(ptx) => println!(
                "ok   {}.cu ({} bytes of PTX; {})",
                src.name,
                ptx.len(),
                src.functions.join(", ")
            ),
            Err(e) => {
                failed += 1;
                println!("FAIL {}.cu: {e}", src.name);
            }
        }
    }
    if failed > 0 {
        return Err(format!("{failed} kernel(s) failed to compile"));
    }
    Ok(())
}

fn print_settings() {
    use gvault_accel::tuning::{current_value, SettingKind, SETTINGS};
    println!(
        "{:<28} {:<7} {:<24} what it does (values)",
        "setting", "kind", "set here"
    );
    for s in SETTINGS {
        let kind = match s.kind {
            SettingKind::User => "user",
            SettingKind::Tuning => "tuning",
            SettingKind::Test => "test",
        };
        // Key material is never echoed.
        let shown = match current_value(s.name) {
            None => "-".to_string(),
            Some(_) if matches!(s.name, "GVAULT_KEY" | "GVAULT_PASSPHRASE") => "(set)".to_string(),
            Some(v) => v,
        };
        println!(
            "{:<28} {:<7} {:<24} {} ({})",
            s.name, kind, shown, s.what, s.values
        );
    }
    println!("\ndocs/tuning.md explains each; tuning settings are read once per process.");
}
