//! What needs NVRTC but no GPU: the on-disk NVRTC cache (gpu/kernels.rs),
//! where an entry is BLAKE3(ptx) ‖ ptx and a damaged entry must be rebuilt,
//! never trusted; and the layout checks of the generated `abi.cuh`, which
//! must make a kernel whose descriptor struct differs from gpu/abi.rs fail
//! to compile. These tests are `#[ignore]`d (a plain `cargo test` reports
//! them as ignored); .ci/run installs NVRTC and runs them with
//! `--include-ignored` and `GVAULT_REQUIRE_NVRTC=1`, under which a missing
//! NVRTC fails them. Without that variable and without NVRTC they say
//! SKIPPED and pass.

use std::fs;
use std::path::{Path, PathBuf};

use gvault_accel::gpu::kernels::{compile_cached, nvrtc_version, KernelSource};

/// Small, so that each recompile is quick.
const PROBE: KernelSource = KernelSource {
    name: "cache_probe",
    source: "extern \"C\" __global__ void cache_probe(unsigned *p) { p[threadIdx.x] ^= 0x5au; }",
    functions: &["cache_probe"],
};
const ARCH: &str = "sm_90";

/// The single entry in `dir` (the test's fresh cache holds exactly one).
fn entry(dir: &Path) -> PathBuf {
    let files: Vec<PathBuf> = fs::read_dir(dir)
        .expect("cache dir")
        .map(|e| e.expect("dir entry").path())
        .collect();
    assert_eq!(files.len(), 1, "one cache entry expected: {files:?}");
    files.into_iter().next().expect("one entry")
}

fn valid_entry(ptx: &str) -> Vec<u8> {
    let mut bytes = blake3::hash(ptx.as_bytes()).as_bytes().to_vec();
    bytes.extend_from_slice(ptx.as_bytes());
    bytes
}

/// NVRTC's version, or None (the test then skips) when it cannot be
/// loaded and GVAULT_REQUIRE_NVRTC is not set.
fn nvrtc(test: &str) -> Option<(i32, i32)> {
    let Some(version) = nvrtc_version() else {
        assert!(
            std::env::var_os("GVAULT_REQUIRE_NVRTC").is_none(),
            "GVAULT_REQUIRE_NVRTC is set but NVRTC cannot be loaded"
        );
        println!("SKIPPED (no NVRTC): {test} needs libnvrtc.so.13 on LD_LIBRARY_PATH");
        return None;
    };
    Some(version)
}

#[test]
#[ignore = "needs NVRTC (libnvrtc.so.13): .ci/run runs it with --include-ignored"]
fn corrupt_cache_entries_are_rebuilt_not_trusted() {
    let Some((major, minor)) = nvrtc("the kernel cache corruption test") else {
        return;
    };
    println!("NVRTC {major}.{minor}");
    let dir = tempfile::tempdir().expect("temp dir");
    let cache = Some(dir.path());

    let ptx = compile_cached(&PROBE, ARCH, cache).expect("compile");
    assert!(ptx.contains("cache_probe"), "PTX lacks the kernel:\n{ptx}");
    let path = entry(dir.path());
    let good = fs::read(&path).expect("read entry");
    assert_eq!(good, valid_entry(&ptx), "entry is not BLAKE3(ptx) ‖ ptx");

    // The cache is read at all: a valid entry with other PTX is returned
    // as is (otherwise the checks below would pass without a cache).
    let planted = format!("{ptx}// planted\n");
    fs::write(&path, valid_entry(&planted)).expect("plant");
    assert_eq!(
        compile_cached(&PROBE, ARCH, cache).expect("compile"),
        planted
    );

    let mut flipped = good.clone();
    let mid = 32 + (flipped.len() - 32) / 2;
    flipped[mid] ^= 0x01;
    let mut bad_digest = good.clone();
    bad_digest[0] ^= 0x80;
    let damage: [(&str, Vec<u8>); 6] = [
        ("a flipped byte in the PTX", flipped),
        ("a flipped byte in the digest", bad_digest),
        ("a truncated entry", good[..good.len() * 2 / 3].to_vec()),
        ("only the digest", good[..32].to_vec()),
        ("garbage", vec![0xa5; good.len()]),
        ("an empty file", Vec::new()),
    ];
    for (what, bytes) in damage {
        fs::write(&path, &bytes).expect("damage entry");
        let again = compile_cached(&PROBE, ARCH, cache)
            .unwrap_or_else(|e| panic!("{what}: compile failed: {e}"));
        assert_eq!(again, ptx, "{what}: the damaged entry was trusted");
        assert_eq!(
            fs::read(entry(dir.path())).expect("read entry"),
            good,
            "{what}: the entry was not rewritten valid"
        );
    }
}

/// A compilation unit `name` of `source`, whose kernel is `layout_probe`.
const fn probe(name: &'static str, source: &'static str) -> KernelSource {
    KernelSource {
        name,
        source,
        functions: &["layout_probe"],
    }
}

#[test]
#[ignore = "needs NVRTC (libnvrtc.so.13): .ci/run runs it with --include-ignored"]
fn descriptor_structs_that_differ_from_the_rust_layout_do_not_compile() {
    if nvrtc("the descriptor layout test").is_none() {
        return;
    }
    // The struct as the kernels define it (ctr_common.cuh) compiles.
    let good = probe(
        "layout_good",
        concat!(
            "#include \"ctr_common.cuh\"\n",
            "extern \"C\" __global__ void layout_probe(unsigned int* p) { p[0] = sizeof(CipherSeg); }\n"
        ),
    );
    compile_cached(&good, ARCH, None).expect("the kernels' CipherSeg compiles");
    let bad = [
        (
            "two fields of one type swapped",
            probe(
                "layout_swapped",
                concat!(
                    "#include \"abi.cuh\"\n",
                    "struct CdcSec { unsigned int n, e, v, pad; };\n",
                    "GV_CHECK_LAYOUT(CdcSec);\n",
                    "extern \"C\" __global__ void layout_probe(unsigned int* p) { p[0] = 1u; }\n"
                ),
            ),
            "field order differs",
        ),
        (
            "a field of another size",
            probe(
                "layout_size",
                concat!(
                    "#include \"abi.cuh\"\n",
                    "struct CipherSeg { unsigned long long offset, len, first_unit; unsigned char iv[8]; };\n",
                    "GV_CHECK_LAYOUT(CipherSeg);\n",
                    "extern \"C\" __global__ void layout_probe(unsigned int* p) { p[0] = 1u; }\n"
                ),
            ),
            "size differs",
        ),
        (
            "a field renamed",
            probe(
                "layout_renamed",
                concat!(
                    "#include \"abi.cuh\"\n",
                    "struct SerialPiece { unsigned long long offset, len, total; unsigned int seg, flags; };\n",
                    "GV_CHECK_LAYOUT(SerialPiece);\n",
                    "extern \"C\" __global__ void layout_probe(unsigned int* p) { p[0] = 1u; }\n"
                ),
            ),
            "total_len",
        ),
    ];
    for (what, src, why) in bad {
        match compile_cached(&src, ARCH, None) {
            Ok(_) => panic!("{what}: compiled, but the layout differs from gpu/abi.rs"),
            Err(e) => assert!(e.contains(why), "{what}: failed for another reason:\n{e}"),
        }
    }
}
