//! Every input of every corpus (`fuzz/corpus/<target>/`) and every
//! regression input (`fuzz/regressions/<target>/`, the inputs that once
//! crashed a target) through its target, on the ordinary test run: a
//! decoder change that makes one of them panic fails here, before any
//! fuzzer runs.

use std::fs;
use std::path::{Path, PathBuf};

fn inputs(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = entries
        .map(|e| e.expect("readable directory entry").path())
        .filter(|p| p.is_file())
        .collect();
    v.sort();
    v
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_owned()
}

#[test]
fn every_target_has_a_seed_corpus_and_replays_it() {
    for t in gvault_fuzz::TARGETS {
        let corpus = inputs(&root().join("corpus").join(t.name));
        assert!(
            !corpus.is_empty(),
            "target {} has no corpus in fuzz/corpus/{} (run gvault-fuzz-seeds)",
            t.name,
            t.name
        );
        let regressions = inputs(&root().join("regressions").join(t.name));
        for p in corpus.iter().chain(&regressions) {
            let data = fs::read(p).expect("readable corpus file");
            let r = std::panic::catch_unwind(|| (t.run)(&data));
            assert!(r.is_ok(), "target {} panics on {}", t.name, p.display());
        }
    }
}

#[test]
fn every_corpus_directory_names_a_target() {
    for sub in ["corpus", "regressions"] {
        let Ok(entries) = fs::read_dir(root().join(sub)) else {
            continue;
        };
        for e in entries {
            let name = e.expect("readable entry").file_name();
            let name = name.to_string_lossy();
            assert!(
                gvault_fuzz::find(&name).is_some(),
                "fuzz/{sub}/{name} names no target"
            );
        }
    }
}
