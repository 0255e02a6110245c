//! Kernel sources (crates/accel/kernels/*.cu, embedded at build time) and
//! their run-time compilation by NVRTC, cached on disk.
//!
//! A cache entry is keyed by source hash, target architecture and NVRTC
//! version, and stores BLAKE3(ptx) ‖ ptx: an entry whose digest does not
//! match (a torn write, a flipped bit) is rebuilt, never trusted.

use std::path::{Path, PathBuf};

/// One compilation unit: a .cu file with its headers expanded.
pub struct KernelSource {
    pub name: &'static str,
    pub source: &'static str,
    /// Functions the runtime loads from it.
    pub functions: &'static [&'static str],
}

/// Headers the .cu files include by name: NVRTC has no file system access
/// to them, so `expanded` puts their text in place of the `#include`.
const HEADERS: &[(&str, &str)] = &[
    (
        "ctr_common.cuh",
        include_str!("../../kernels/ctr_common.cuh"),
    ),
    ("aes_core.cuh", include_str!("../../kernels/aes_core.cuh")),
];

pub const SOURCES: &[KernelSource] = &[
    KernelSource {
        name: "aes",
        source: include_str!("../../kernels/aes.cu"),
        functions: &["aes256_ctr", "aes256_ctr_v2", "aes256_ecb_encrypt_blocks"],
    },
    KernelSource {
        name: "gcm",
        source: include_str!("../../kernels/gcm.cu"),
        functions: GCM_FUNCTIONS,
    },
    KernelSource {
        name: "tea",
        source: include_str!("../../kernels/tea.cu"),
        functions: &["tea_ctr", "tea_encrypt_blocks"],
    },
    KernelSource {
        name: "blowfish",
        source: include_str!("../../kernels/blowfish.cu"),
        functions: &["blowfish_ctr", "blowfish_ctr_v2", "blowfish_encrypt_blocks"],
    },
    KernelSource {
        name: "blake3",
        source: include_str!("../../kernels/blake3.cu"),
        functions: &[
            "blake3_chunks",
            "blake3_reduce",
            "blake3_chunks_crc32c",
            "blake3_chunks_crc32c_rep2",
            "blake3_chunks_crc32c_rep4",
            "blake3_reduce_crc32c",
        ],
    },
    KernelSource {
        name: "cdc",
        source: include_str!("../../kernels/cdc.cu"),
        functions: &[
            "gear_candidates",
            "cdc_summarize",
            "cdc_walk",
            "cdc_sync",
            "cdc_fixup",
        ],
    },
    KernelSource {
        // The fused job's device-built chunk list shares the structs and
        // helpers of blake3.cu and cdc.cu (kernels/fused.cu).
        name: "fused",
        source: concat!(
            include_str!("../../kernels/blake3.cu"),
            include_str!("../../kernels/cdc.cu"),
            include_str!("../../kernels/fused.cu")
        ),
        functions: &["fused_count", "fused_scan", "fused_scatter"],
    },
    KernelSource {
        // Seed 001's sliding-window MD5 reuses serial.cu's MD5.
        name: "seed001",
        source: concat!(
            include_str!("../../kernels/serial.cu"),
            include_str!("../../kernels/seed001.cu")
        ),
        functions: &["sliding_md5"],
    },
    KernelSource {
        name: "serial",
        source: include_str!("../../kernels/serial.cu"),
        functions: &[
            "sha256_pieces",
            "md5_pieces",
            "crc32_pieces",
            "crc32c_pieces",
        ],
    },
    KernelSource {
        name: "rsa",
        source: include_str!("../../kernels/rsa.cu"),
        functions: &["rsa_crt_t1024", "rsa_crt_t2048", "rsa_crt_t4096"],
    },
];

/// The AES-256-GCM kernels (`gpu/gcm.rs`).
pub const GCM_FUNCTIONS: &[&str] = &[
    "aes256_gcm_ctr",
    "aes256_gcm_ctr_v2",
    "gcm_setup",
    "gcm_setup_wide",
    "gcm_ghash",
    "gcm_ghash_wide",
    "gcm_finalize",
];

/// A header's text, made when a unit is built.
type MakeHeader = fn() -> String;

/// Headers generated from Rust (`gpu/abi.rs`), by the name they are
/// included by.
const GENERATED: &[(&str, MakeHeader)] = &[
    (super::abi::HEADER_NAME, super::abi::header),
    (super::abi::GEAR_HEADER_NAME, super::abi::gear_header),
    (super::abi::CRC_POW_HEADER_NAME, super::abi::crc_pow_header),
    (super::rsa::HEADER_NAME, super::rsa::header),
];

/// The compilation unit's text: each `#include "name"` of a header in
/// `HEADERS` or `GENERATED` replaced by the header's text, once per unit
/// (later includes of it are dropped).
pub fn expanded(src: &KernelSource) -> String {
    let mut seen = Vec::new();
    let mut out = String::with_capacity(src.source.len() * 2);
    include_into(src.source, &mut seen, &mut out);
    out
}

fn include_into(text: &str, seen: &mut Vec<String>, out: &mut String) {
    for line in text.split_inclusive('\n') {
        let name = line
            .trim()
            .strip_prefix("#include \"")
            .and_then(|r| r.split('"').next());
        let header = name.and_then(|n| {
            let generated = GENERATED.iter().find(|(h, _)| *h == n);
            let embedded = HEADERS.iter().find(|(h, _)| *h == n);
            generated
                .map(|(_, make)| make())
                .or_else(|| embedded.map(|(_, text)| text.to_string()))
        });
        match (name, header) {
            (Some(name), Some(text)) => {
                if !seen.iter().any(|s| s == name) {
                    seen.push(name.to_string());
                    include_into(&text, seen, out);
                    if !out.ends_with('\n') {
                        out.push('\n');
                    }
                }
            }
            _ => out.push_str(line),
        }
    }
}

/// NVRTC's version, when the library can be loaded.
pub fn nvrtc_version() -> Option<(i32, i32)> {
    // SAFETY: probing for the library first; cudarc's loader panics otherwise.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return None;
    }
    let (mut major, mut minor) = (0, 0);
    // SAFETY: plain out-parameters.
    let r = unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) };
    (r == cudarc::nvrtc::sys::nvrtcResult::NVRTC_SUCCESS).then_some((major, minor))
}

fn cache_dir() -> Option<PathBuf> {
    if let Some(dir) = &crate::tuning::tuning().kernel_cache {
        return Some(dir.clone());
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("gvault").join("kernels"))
}

/// Compiles one source for `arch` (e.g. "sm_90"), from cache when a valid
/// entry exists. Returns PTX text. The cache directory is
/// `$GVAULT_KERNEL_CACHE`, else `$XDG_CACHE_HOME/gvault/kernels`, else
/// `~/.cache/gvault/kernels`.
pub fn compile(src: &KernelSource, arch: &'static str) -> Result<String, String> {
    compile_cached(src, arch, cache_dir().as_deref())
}

/// [`compile`] with an explicit cache directory (`None`: no cache), so
/// that the cache's handling of damaged entries can be tested in isolation.
pub fn compile_cached(
    src: &KernelSource,
    arch: &'static str,
    cache: Option<&Path>,
) -> Result<String, String> {
    let (major, minor) = nvrtc_version().ok_or("NVRTC (libnvrtc.so.13) not found")?;
    let text = expanded(src);
    let key = blake3::hash(format!("{arch}\0{major}.{minor}\0{text}").as_bytes());
    let path = cache.map(|d| {
        d.join(format!(
            "{}-{arch}-nvrtc{major}.{minor}-{}.ptx",
            src.name,
            &key.to_hex()[..16]
        ))
    });
    if let Some(path) = &path {
        if let Ok(bytes) = std::fs::read(path) {
            if let Some(ptx) = decode_cache_entry(&bytes) {
                return Ok(ptx);
            }
            eprintln!(
                "gvault: kernel cache entry {} is corrupt; rebuilding",
                path.display()
            );
        }
    }
    let opts = cudarc::nvrtc::CompileOptions {
        arch: Some(arch),
        options: vec![
            "-std=c++17".into(),
            "-default-device".into(),
            "-lineinfo".into(),
        ],
        name: Some(format!("{}.cu", src.name)),
        ..Default::default()
    };
    let ptx = cudarc::nvrtc::compile_ptx_with_opts(&text, opts).map_err(|e| match e {
        cudarc::nvrtc::CompileError::CompileError { log, .. } => {
            format!(
                "{}.cu failed to compile:\n{}",
                src.name,
                log.to_string_lossy()
            )
        }
        other => format!("{}.cu: {other}", src.name),
    })?;
    let ptx = ptx.to_src();
    if let Some(path) = &path {
        // Best effort: a cache we cannot write only costs a recompile.
        if let Some(dir) = path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        let bytes = encode_cache_entry(&ptx);
        let tmp = path.with_extension("tmp");
        if std::fs::write(&tmp, &bytes).is_ok() {
            let _ = std::fs::rename(&tmp, path);
        }
    }
    Ok(ptx)
}

/// A cache entry's bytes: BLAKE3(ptx) ‖ ptx.
pub fn encode_cache_entry(ptx: &str) -> Vec<u8> {
    let mut bytes = blake3::hash(ptx.as_bytes()).as_bytes().to_vec();
    bytes.extend_from_slice(ptx.as_bytes());
    bytes
}

/// The PTX of a cache entry, or `None` when the entry is damaged (digest
/// mismatch, too short, not UTF-8) and must be rebuilt.
pub fn decode_cache_entry(bytes: &[u8]) -> Option<String> {
    let (digest, ptx) = (bytes.get(..32)?, bytes.get(32..)?);
    if ptx.is_empty() || blake3::hash(ptx).as_bytes() != digest {
        return None;
    }
    String::from_utf8(ptx.to_vec()).ok()
}
