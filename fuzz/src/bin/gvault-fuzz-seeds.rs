//! Writes the seed corpora (`fuzz/corpus/<target>/`) from real files.
//! Usage: gvault-fuzz-seeds [CORPUS_DIR]  (default: the crate's corpus/)

fn main() {
    let corpus = std::env::args()
        .nth(1)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus"));
    let mut w = gvault_fuzz::seeds::SeedWriter::new(&corpus);
    gvault_fuzz::seeds::store(&mut w);
    gvault_fuzz::seeds_accel::accel(&mut w);
    gvault_fuzz::seeds_cli::cli(&mut w);
    gvault_fuzz::seeds_cas::cas(&mut w);
    gvault_fuzz::seeds_service::service(&mut w);
    println!("{} new seed(s) in {}", w.written, corpus.display());
}
