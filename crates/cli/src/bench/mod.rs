//! `gvault bench`: reproductions of the seeds' measurements.

pub mod calibrate;
pub mod cas;
pub mod checkpoint;
mod host_memory;
pub mod link;
pub mod lsm;
pub(crate) mod measure;
mod one_core;
pub mod plot;
pub mod primitive;
mod replay;
pub mod rsa;
pub mod seed001;
pub mod service;
mod service_floor;
mod service_plot;

#[derive(clap::Subcommand, Debug)]
pub enum BenchCommand {
    /// Per-primitive throughput, 1 core and all cores, 512 B to 1 GiB.
    Primitive(primitive::PrimitiveArgs),
    /// Host<->device copy throughput, pinned and pageable.
    Link(link::LinkArgs),
    /// The store's LSM engine: db_bench workloads and seed 000 §4.5.
    Lsm(lsm::LsmArgs),
    /// Fit the auto backend's cost model on this machine and store it.
    Calibrate(calibrate::CalibrateArgs),
    /// Draw `primitive --json` output as seed 000's throughput figures.
    Plot(plot::PlotArgs),
    /// Replay a recorded sweep's auto decisions under a cost model, offline.
    Replay(replay::ReplayArgs),
    /// Seed 001 §4 on the repository: backup, re-backup and restore of the
    /// different / similar / checkpoint workloads, CPU, auto and the
    /// CA-Infinite oracle, content-defined and fixed chunks.
    Cas(cas::CasArgs),
    /// Checkpoints of a synthetic bf16 state dict through the checkpoint
    /// engine: first save, second save with 5% changed, load; GPU-resident
    /// and host paths, 1 or more GPUs.
    Checkpoint(checkpoint::CheckpointArgs),
    /// Seed 001 (HashGPU): sliding-window MD5 (Fig. 14) and parallel Merkle-Damgård.
    Seed001(seed001::Seed001Args),
    /// RSA private-key ops/s against batch size: CPU, openssl, GPU, auto, batch ordering (seed 004).
    Rsa(rsa::RsaArgs),
    /// The shared crypto service (seed 004 §5, issue 23): GB/s and requests/s
    /// against request size for 1 to 64 clients, in process and through
    /// `gvault serve` with and without batching; overhead and batching gain.
    Service(service::ServiceArgs),
}

pub fn run(cmd: BenchCommand) -> Result<(), String> {
    match cmd {
        BenchCommand::Primitive(args) => primitive::run(args),
        BenchCommand::Link(args) => link::run(args),
        BenchCommand::Lsm(args) => lsm::run(args),
        BenchCommand::Calibrate(args) => calibrate::run(args),
        BenchCommand::Plot(args) => plot::run(args),
        BenchCommand::Replay(args) => replay::run(args),
        BenchCommand::Seed001(args) => seed001::run(args),
        BenchCommand::Cas(args) => cas::run(args),
        BenchCommand::Checkpoint(args) => checkpoint::run(args),
        BenchCommand::Rsa(args) => rsa::run(args),
        BenchCommand::Service(args) => service::run(args),
    }
}
