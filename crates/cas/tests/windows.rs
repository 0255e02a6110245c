//! A large file streamed through many small read windows (its own process:
//! `GVAULT_CAS_WINDOW_MIB` is read once), each window's last chunk carried
//! into the next; then a second backup with a few changed stretches. Both
//! restore bit for bit, and the repository checks clean.

use std::fs;

use gvault_cas::accel_jobs::cpu_backend;
use gvault_cas::{Chunker, InitOptions, Repository, Snapshot};
use gvault_store::keys::generate_key;
use gvault_store::Encryption;
use rand::{RngCore, SeedableRng};

#[test]
fn a_stream_of_many_windows_restores_exactly() {
    // The smallest window the setting takes; read before any backup runs.
    std::env::set_var("GVAULT_CAS_WINDOW_MIB", "8");
    let d = tempfile::tempdir().unwrap();
    let repo = Repository::init(
        &d.path().join("repo"),
        &Encryption::with_key(generate_key()),
        InitOptions {
            chunker: Chunker::Cdc {
                min: 4096,
                avg: 16384,
                max: 65536,
            },
            compression: true,
        },
        cpu_backend(),
    )
    .unwrap();
    // 120 MiB: fifteen windows.
    let mut data = vec![0u8; 120 << 20];
    let mut rng = rand::rngs::StdRng::seed_from_u64(5);
    rng.fill_bytes(&mut data);
    // Some compressible stretches.
    for b in &mut data[30 << 20..34 << 20] {
        *b = b'a' + (*b & 3);
    }
    let original = data.clone();
    let first = gvault_cas::backup_reader(&repo, "big", &mut &data[..], &mut |_| {}).unwrap();
    assert!(first.packs_written >= 7, "{first:?}");
    // A few changed stretches.
    for at in [3usize << 20, 50 << 20, 101 << 20] {
        rng.fill_bytes(&mut data[at..at + 300_000]);
    }
    let second = gvault_cas::backup_reader(&repo, "big", &mut &data[..], &mut |_| {}).unwrap();
    assert!(
        second.chunks_known > 0 && second.chunks_new > 0,
        "{second:?}"
    );
    assert!(second.bytes_added < 4 << 20, "{second:?}");
    let report = gvault_cas::check(&repo, true, &mut |_, _| {}).unwrap();
    assert!(report.is_clean(), "{report:?}");
    for (s, name, want) in [(&first, "one", &original), (&second, "two", &data)] {
        let snap = Snapshot::read(&repo, &s.snapshot).unwrap();
        let target = d.path().join(name);
        let r = gvault_cas::restore(&repo, &snap, &target, None, &|_, _| {}).unwrap();
        assert!(r.failed.is_empty(), "{:?}", r.failed);
        assert!(fs::read(target.join("big")).unwrap() == *want, "{name}");
    }
}
