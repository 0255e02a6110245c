//! Compiles and runs crates/cli/src/store_cmd.rs against this crate, so the
//! store's CLI can be built and tested before it is wired into `gvault`.
//! `cargo run -p gvault-store --example cli_check -- put --store DIR k v`

#[path = "../../cli/src/store_cmd.rs"]
mod store_cmd;

use clap::Parser;

#[derive(Parser)]
#[command(name = "gvault-store-cli")]
struct Cli {
    #[command(subcommand)]
    command: store_cmd::StoreCommand,
}

fn main() {
    let cli = Cli::parse();
    std::process::exit(store_cmd::run(cli.command));
}
