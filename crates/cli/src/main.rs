//! The `gvault` command: the store (`init`, `put`, `get`, `del`, `scan`,
//! `export`, `import`, `stats`, `verify`, `gc`, `compact`, `salvage`, `demo`), backups
//! (`repo`), the accelerator service (`serve`), benchmarks and diagnostics.
//!
//! Exit statuses: 0 success, 1 key not found, 2 error (message on stderr),
//! 3 `verify` found damage, 141 stdout or stderr was closed by its reader
//! (`gvault scan | head -1`; see `output`).

// First, so that its `print!`/`println!`/`eprint!`/`eprintln!` are the
// ones every module below uses.
#[macro_use]
mod output;

mod bench;
mod doctor;
mod progress;
mod repo_cmd;
mod serve_cmd;
mod store_cmd;

use clap::{CommandFactory, Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "gvault",
    version,
    about = "Encrypted, verified, deduplicating storage with GPU-accelerated primitives",
    after_help = "Exit status: 0 success, 1 key not found, 2 error (message on stderr), \
3 verify found damage, 141 output closed early (as a shell reports a tool SIGPIPE ended)."
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
    /// Print a shell completion script to stdout.
    ///
    /// bash: `gvault completions bash > ~/.local/share/bash-completion/completions/gvault`;
    /// zsh: into a file `_gvault` on $fpath; fish: `gvault completions fish >
    /// ~/.config/fish/completions/gvault.fish`.
    Completions {
        /// The shell to complete for.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Deduplicating, encrypted backups: `gvault repo init`, `backup`, `restore`, `check`, ...
    #[command(subcommand)]
    Repo(repo_cmd::RepoCommand),
    /// Share this machine's accelerators with every process: a daemon on a
    /// Unix socket (`gvault serve status` shows what it is doing).
    Serve(serve_cmd::ServeArgs),
    #[command(flatten)]
    Store(store_cmd::StoreCommand),
}

/// Exit status of a command that failed.
const EXIT_ERROR: i32 = 2;

fn main() {
    let code = output::run(|| {
        let cli = Cli::parse();
        let result = match cli.command {
            Command::Bench(cmd) => bench::run(cmd),
            Command::Doctor(args) => doctor::run(args),
            Command::Completions { shell } => {
                let mut out = Vec::new();
                clap_complete::generate(shell, &mut Cli::command(), "gvault", &mut out);
                print!("{}", String::from_utf8_lossy(&out));
                Ok(())
            }
            Command::Repo(cmd) => return repo_cmd::run(cmd),
            Command::Serve(args) => serve_cmd::run(args),
            Command::Store(cmd) => return store_cmd::run(cmd),
        };
        match result {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("gvault: {e}");
                EXIT_ERROR
            }
        }
    });
    std::process::exit(code);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every subcommand, at any depth, with its path ("keys status").
    fn all_commands(cmd: &clap::Command, path: &str, out: &mut Vec<(String, clap::Command)>) {
        for sub in cmd.get_subcommands() {
            let p = format!("{path} {}", sub.get_name()).trim().to_string();
            out.push((p.clone(), sub.clone()));
            all_commands(sub, &p, out);
        }
    }

    #[test]
    fn every_subcommand_and_argument_has_help() {
        let cli = Cli::command();
        cli.clone().debug_assert();
        let mut cmds = Vec::new();
        all_commands(&cli, "", &mut cmds);
        assert!(cmds.len() > 20, "{} commands", cmds.len());
        let mut missing = Vec::new();
        for (path, cmd) in &cmds {
            if cmd.get_about().is_none() {
                missing.push(format!("`{path}` has no description"));
            }
            for arg in cmd.get_arguments() {
                let id = arg.get_id().as_str();
                if id == "help" || id == "version" {
                    continue;
                }
                if arg.get_help().is_none() && arg.get_long_help().is_none() {
                    missing.push(format!("`{path}`: argument {id} has no help"));
                }
            }
        }
        assert!(missing.is_empty(), "{}", missing.join("\n"));
    }

    #[test]
    fn completions_name_every_subcommand() {
        for shell in [
            clap_complete::Shell::Bash,
            clap_complete::Shell::Zsh,
            clap_complete::Shell::Fish,
        ] {
            let mut out = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "gvault", &mut out);
            let text = String::from_utf8(out).unwrap();
            for name in ["export", "import", "verify", "reencrypt", "primitive"] {
                assert!(text.contains(name), "{shell}: no {name}");
            }
        }
    }
}
