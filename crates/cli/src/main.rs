//! The `gvault` command: the store (`init`, `put`, `get`, `del`, `scan`,
//! `import`, `stats`, `verify`, `gc`, `compact`, `demo`), benchmarks and diagnostics.

mod bench;
mod doctor;
mod store_cmd;

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
    #[command(flatten)]
    Store(store_cmd::StoreCommand),
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Bench(cmd) => bench::run(cmd),
        Command::Doctor(args) => doctor::run(args),
        Command::Store(cmd) => std::process::exit(store_cmd::run(cmd)),
    };
    if let Err(e) = result {
        eprintln!("gvault: {e}");
        std::process::exit(2);
    }
}
