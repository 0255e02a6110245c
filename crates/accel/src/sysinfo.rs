//! What the machine offers the CPU backend: cores and the SIMD features the
//! crates pick at run time.

pub struct CpuInfo {
    pub logical_cores: usize,
    pub features: Vec<(&'static str, bool)>,
}

pub fn cpu_info() -> CpuInfo {
    let logical_cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    #[cfg(target_arch = "x86_64")]
    let features = vec![
        (
            "aes (AES-NI: aws-lc AES-GCM/CTR)",
            std::is_x86_feature_detected!("aes"),
        ),
        (
            "pclmulqdq (GHASH, crc32fast)",
            std::is_x86_feature_detected!("pclmulqdq"),
        ),
        (
            "vaes (aws-lc AES-GCM AVX-512 path)",
            std::is_x86_feature_detected!("vaes"),
        ),
        (
            "vpclmulqdq (aws-lc GHASH AVX-512 path)",
            std::is_x86_feature_detected!("vpclmulqdq"),
        ),
        (
            "sha (SHA-NI: aws-lc SHA-256)",
            std::is_x86_feature_detected!("sha"),
        ),
        ("sse4.2 (crc32c)", std::is_x86_feature_detected!("sse4.2")),
        ("avx2 (blake3)", std::is_x86_feature_detected!("avx2")),
        ("avx512f (blake3)", std::is_x86_feature_detected!("avx512f")),
    ];
    #[cfg(not(target_arch = "x86_64"))]
    let features = Vec::new();
    CpuInfo {
        logical_cores,
        features,
    }
}
