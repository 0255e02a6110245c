//! `gvault bench`: reproductions of the seeds' measurements.

mod measure;
pub mod primitive;

#[derive(clap::Subcommand, Debug)]
pub enum BenchCommand {
    /// Per-primitive throughput, 1 core and all cores, 512 B to 1 GiB.
    Primitive(primitive::PrimitiveArgs),
}

pub fn run(cmd: BenchCommand) -> Result<(), String> {
    match cmd {
        BenchCommand::Primitive(args) => primitive::run(args),
    }
}
