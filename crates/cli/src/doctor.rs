//! `gvault doctor`: what this machine offers gvault.

use gvault_accel::sysinfo::cpu_info;

pub fn run() -> Result<(), String> {
    let cpu = cpu_info();
    println!("gvault {}", env!("CARGO_PKG_VERSION"));
    println!("cpu: {} logical cores", cpu.logical_cores);
    for (name, present) in &cpu.features {
        println!("  {:<44} {}", name, if *present { "yes" } else { "no" });
    }
    println!("gpu: no GPU backend in this build yet; every op runs on the CPU backend");
    Ok(())
}
