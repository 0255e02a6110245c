//! `gvault bench link`: host<->device copy throughput, pinned and pageable,
//! 512 B to 1 GiB (seed 000 §4.2), timed with device events.

use gvault_accel::{measure_link, measure_link_bidirectional, GpuBackend};

use super::measure::size_label;

#[derive(clap::Args, Debug)]
pub struct LinkArgs {
    /// Sizes 4 KiB, 1 MiB, 16 MiB, 256 MiB only.
    #[arg(long)]
    quick: bool,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

pub fn run(args: LinkArgs) -> Result<(), String> {
    let g = GpuBackend::probe().map_err(|why| format!("bench link needs a GPU: {why}"))?;
    let sizes: Vec<usize> = if args.quick {
        vec![4 << 10, 1 << 20, 16 << 20, 256 << 20]
    } else {
        (9..=30).map(|p| 1usize << p).collect()
    };
    let dev = &g.devices()[0];
    let reps = if args.quick { 5 } else { 9 };
    let figs = measure_link(dev, &sizes, reps)?;
    // Both directions at once, pinned: the bound of a cipher job streaming
    // through the GPU (copy-in and copy-out overlap).
    let bidi: Vec<(usize, f64)> = sizes
        .iter()
        .filter(|&&n| n >= 1 << 20)
        .map(|&n| measure_link_bidirectional(dev, n, reps).map(|g| (n, g)))
        .collect::<Result<_, _>>()?;
    if args.json {
        let mut rows: Vec<_> = figs
            .iter()
            .map(|f| serde_json::json!({"bytes": f.bytes, "pinned": f.pinned, "to_device": f.to_device, "gbps": f.gbps}))
            .collect();
        rows.extend(bidi.iter().map(|(n, g)| {
            serde_json::json!({"bytes": n, "pinned": true, "bidirectional": true, "gbps_each_way": g})
        }));
        println!(
            "{}",
            serde_json::to_string_pretty(&rows).map_err(|e| e.to_string())?
        );
        return Ok(());
    }
    println!(
        "GPU {} ({}): GB/s, median of device-event-timed copies",
        dev.ordinal, dev.name
    );
    println!(
        "{:>8} {:>12} {:>12} {:>12} {:>12} {:>14}",
        "size", "pinned h2d", "pinned d2h", "pageable h2d", "pageable d2h", "pinned both*"
    );
    for &n in &sizes {
        let get = |p: bool, h: bool| {
            figs.iter()
                .find(|f| f.bytes == n && f.pinned == p && f.to_device == h)
                .map(|f| f.gbps)
                .unwrap_or(0.0)
        };
        let both = bidi
            .iter()
            .find(|(b, _)| *b == n)
            .map(|(_, g)| format!("{g:.2}"))
            .unwrap_or_else(|| "-".into());
        println!(
            "{:>8} {:>12.2} {:>12.2} {:>12.2} {:>12.2} {:>14}",
            size_label(n),
            get(true, true),
            get(true, false),
            get(false, true),
            get(false, false),
            both
        );
    }
    println!("* both directions at once, GB/s each way (the bound for data streamed through the GPU and back)");
    let (copy, read) = super::host_memory::measure(reps);
    println!(
        "host memory, all {} cores, 1 GiB: copy {copy:.2} GB/s, read {read:.2} GB/s \
         (the bound of any job on host data: a cipher reads and writes, a hash reads)",
        rayon::current_num_threads()
    );
    Ok(())
}
