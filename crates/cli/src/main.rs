//! The `gvault` command: benchmarks and diagnostics now; the store, backup
//! and service commands as their crates land.

mod bench;
mod doctor;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "gvault",
    version,
    about = "Encrypted, verified, deduplicating storage with GPU-accelerated primitives"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Reproduce the seeds' measurements on this machine.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
    /// Show what this machine offers: cores, SIMD features, GPUs.
    Doctor(doctor::DoctorArgs),
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Bench(cmd) => bench::run(cmd),
        Command::Doctor(args) => doctor::run(args),
    };
    if let Err(e) = result {
        eprintln!("gvault: {e}");
        std::process::exit(2);
    }
}
