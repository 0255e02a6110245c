//! Typed kernel launches. Every kernel is declared once below with its
//! parameters, by name and type, in the order of its `extern "C"`
//! signature; a launch names each argument (`GcmSetupArgs { rk, segs, .. }`),
//! and the parameter array the driver wants is built from the declaration
//! in one place, [`Device::launch`]. A unit test parses every kernel
//! signature in the .cu sources and compares it with these declarations,
//! names and C types, so an argument cannot be passed in the wrong place
//! or with the wrong width without a test failing.
//!
//! Kernel handles are resolved once, when `Device::open` loads the modules:
//! `Kernel::id` indexes the device's function table.

use std::ffi::c_void;
use std::marker::PhantomData;

use cudarc::driver::result as cu;
use cudarc::driver::sys::CUstream;

use super::abi::{
    B3Level, B3Piece, CdcJob, CdcSec, CdcSeg, CipherSeg, FusedStat, GcmSeg, SerialPiece,
};
use super::runtime::{err, DevError, Device};

// The C-type descriptions below (CName, CType, KernelArg, PARAMS) exist for
// the signature test; the launch itself needs only the field order.

/// The C spelling of a type that a device pointer points to.
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) trait CName {
    const C_NAME: &'static str;
}

impl CName for u8 {
    const C_NAME: &'static str = "unsigned char";
}
impl CName for u32 {
    const C_NAME: &'static str = "unsigned int";
}
impl CName for u64 {
    const C_NAME: &'static str = "unsigned long long";
}

/// A device address of `T`s, passed to a kernel as a `T*` (8 bytes).
#[repr(transparent)]
pub(crate) struct DevPtr<T>(u64, PhantomData<fn() -> T>);

impl<T> DevPtr<T> {
    pub(crate) const fn new(addr: u64) -> DevPtr<T> {
        DevPtr(addr, PhantomData)
    }
}

impl<T> From<u64> for DevPtr<T> {
    fn from(addr: u64) -> DevPtr<T> {
        DevPtr::new(addr)
    }
}

impl<T> Clone for DevPtr<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for DevPtr<T> {}
impl<T> std::fmt::Debug for DevPtr<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

/// A kernel parameter's C type: a value or a pointer to the named type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) enum CType {
    Val(&'static str),
    Ptr(&'static str),
}

/// A Rust type that is passed exactly as the C type `C_TYPE` (same size and
/// representation).
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) trait KernelArg: Copy {
    const C_TYPE: CType;
}

impl KernelArg for u32 {
    const C_TYPE: CType = CType::Val("unsigned int");
}
impl KernelArg for u64 {
    const C_TYPE: CType = CType::Val("unsigned long long");
}
impl KernelArg for i64 {
    const C_TYPE: CType = CType::Val("long long");
}
impl<T: CName> KernelArg for DevPtr<T> {
    const C_TYPE: CType = CType::Ptr(T::C_NAME);
}

/// The arguments of a kernel, one field per parameter.
///
/// # Safety
/// `with_params` must pass one pointer per parameter, in the kernel's
/// order, each to a field whose type is that parameter's C type (`PARAMS`).
/// Only `kernels!` implements it.
pub(crate) unsafe trait KernelArgs {
    /// (name, C type) of each parameter, in order.
    #[cfg_attr(not(test), allow(dead_code))]
    const PARAMS: &'static [(&'static str, CType)];
    /// The kernels these arguments are for.
    const KERNELS: &'static [&'static str];
    fn with_params<R>(&mut self, f: impl FnOnce(&mut [*mut c_void]) -> R) -> R;
}

/// A kernel taking arguments `A`, by its index in [`NAMES`].
pub(crate) struct Kernel<A> {
    pub(crate) id: usize,
    pub(crate) name: &'static str,
    _args: PhantomData<fn(A)>,
}

impl<A> Clone for Kernel<A> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<A> Copy for Kernel<A> {}
impl<A> std::fmt::Debug for Kernel<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

impl<A: KernelArgs> Kernel<A> {
    /// The kernel `name`, which must be one that `A` is declared for
    /// (checked when the constant is evaluated, i.e. at compile time).
    const fn new(name: &'static str) -> Kernel<A> {
        assert!(
            position(A::KERNELS, name).is_some(),
            "kernel not declared for these arguments"
        );
        match position(NAMES, name) {
            Some(id) => Kernel {
                id,
                name,
                _args: PhantomData,
            },
            None => panic!("undeclared kernel"),
        }
    }
}

const fn str_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

const fn position(names: &[&str], name: &str) -> Option<usize> {
    let mut i = 0;
    while i < names.len() {
        if str_eq(names[i], name) {
            return Some(i);
        }
        i += 1;
    }
    None
}

/// The index of kernel `name` in [`NAMES`], if it is declared.
pub(crate) fn index_of(name: &str) -> Option<usize> {
    position(NAMES, name)
}

/// Grid and block size (threads, 1-D) and dynamic shared memory (bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Shape {
    pub grid: u32,
    pub block: u32,
    pub shared: u32,
}

impl Device {
    /// Queues `kernel` with `args` on `stream` (a grid of 0 runs 1 block).
    ///
    /// # Safety
    /// Every device pointer in `args` must be valid for everything the
    /// kernel does with it (the ranges its descriptors name included) until
    /// the work queued on `stream` completes; `stream` is a live stream of
    /// this device's context, bound to the calling thread; the block size
    /// and dynamic shared memory are ones the kernel was written for.
    pub(crate) unsafe fn launch<A: KernelArgs>(
        &self,
        kernel: Kernel<A>,
        shape: Shape,
        stream: CUstream,
        mut args: A,
    ) -> Result<(), DevError> {
        let func = self.function(kernel.id, kernel.name)?;
        args.with_params(|params| {
            // SAFETY: `params` holds one pointer per parameter of `kernel`,
            // in order, to a field of `args` of exactly that parameter's C
            // type (`KernelArgs`, declared below and compared with the .cu
            // signatures by a test); `args` outlives the call, and the
            // driver copies the values before it returns. `func` is loaded
            // in this device's context. The rest is the caller's contract.
            unsafe {
                cu::launch_kernel(
                    func,
                    (shape.grid.max(1), 1, 1),
                    (shape.block, 1, 1),
                    shape.shared,
                    stream,
                    params,
                )
            }
        })
        .map_err(|e| err(&format!("launching {}", kernel.name), e))
    }
}

/// Declares argument structs and the kernels that take them:
/// `Args { param: Type, .. } => CONST = "kernel", ..;`. Parameters are in
/// the kernel's order and named as in its .cu signature.
macro_rules! kernels {
    ($(
        $(#[$meta:meta])*
        $args:ident { $($field:ident : $ty:ty),* $(,)? }
        => $($(#[$kmeta:meta])* $konst:ident = $kname:literal),+ ;
    )*) => {
        $(
            $(#[$meta])*
            #[derive(Clone, Copy, Debug)]
            pub(crate) struct $args {
                $(pub $field: $ty),*
            }

            // SAFETY: one pointer per field, in declaration order, each to
            // a field of the type whose C_TYPE is recorded in PARAMS.
            unsafe impl KernelArgs for $args {
                const PARAMS: &'static [(&'static str, CType)] =
                    &[$((stringify!($field), <$ty as KernelArg>::C_TYPE)),*];
                const KERNELS: &'static [&'static str] = &[$($kname),+];
                fn with_params<R>(&mut self, f: impl FnOnce(&mut [*mut c_void]) -> R) -> R {
                    f(&mut [$(&mut self.$field as *mut $ty as *mut c_void),*])
                }
            }

            $(
                $(#[$kmeta])*
                pub(crate) const $konst: Kernel<$args> = Kernel::new($kname);
            )+
        )*

        /// Every declared kernel, by id.
        pub(crate) const NAMES: &[&str] = &[$($($kname),+),*];

        /// Every declared kernel with its parameters, for the signature test.
        #[cfg(test)]
        pub(crate) const SIGNATURES: &[(&str, &[(&str, CType)])] =
            &[$($(($kname, <$args as KernelArgs>::PARAMS)),+),*];
    };
}

kernels! {
    /// aes.cu: AES-256 CTR over 16-byte units; each result lands
    /// `out_delta` bytes after its input (0: in place).
    AesCtrArgs {
        rk: DevPtr<u32>,
        data: DevPtr<u8>,
        segs: DevPtr<CipherSeg>,
        nsegs: u32,
        total_units: u64,
        out_delta: i64,
    } => AES256_CTR = "aes256_ctr", AES256_CTR_V2 = "aes256_ctr_v2";

    /// aes.cu: raw AES-256 of 16-byte blocks (compiled, not launched).
    AesEcbArgs {
        rk: DevPtr<u32>,
        input: DevPtr<u8>,
        output: DevPtr<u8>,
        nblocks: u64,
    } => #[allow(dead_code)] AES256_ECB_ENCRYPT_BLOCKS = "aes256_ecb_encrypt_blocks";

    /// tea.cu: TEA CTR over 8-byte units, in place.
    TeaCtrArgs {
        key: DevPtr<u32>,
        data: DevPtr<u8>,
        segs: DevPtr<CipherSeg>,
        nsegs: u32,
        total_units: u64,
    } => TEA_CTR = "tea_ctr";

    /// tea.cu: raw TEA of 8-byte blocks in place (compiled, not launched).
    TeaEcbArgs {
        key: DevPtr<u32>,
        data: DevPtr<u8>,
        nblocks: u64,
    } => #[allow(dead_code)] TEA_ENCRYPT_BLOCKS = "tea_encrypt_blocks";

    /// blowfish.cu: Blowfish CTR over 8-byte units, in place.
    BlowfishCtrArgs {
        pbox: DevPtr<u32>,
        sbox: DevPtr<u32>,
        data: DevPtr<u8>,
        segs: DevPtr<CipherSeg>,
        nsegs: u32,
        total_units: u64,
    } => BLOWFISH_CTR = "blowfish_ctr", BLOWFISH_CTR_V2 = "blowfish_ctr_v2";

    /// blowfish.cu: raw Blowfish of 8-byte blocks in place (compiled, not
    /// launched).
    BlowfishEcbArgs {
        pbox: DevPtr<u32>,
        sbox: DevPtr<u32>,
        data: DevPtr<u8>,
        nblocks: u64,
    } => #[allow(dead_code)] BLOWFISH_ENCRYPT_BLOCKS = "blowfish_encrypt_blocks";

    /// gcm.cu: GCM's CTR pass, in place.
    GcmCtrArgs {
        rk: DevPtr<u32>,
        data: DevPtr<u8>,
        segs: DevPtr<GcmSeg>,
        nsegs: u32,
        total_units: u64,
    } => AES256_GCM_CTR = "aes256_gcm_ctr", AES256_GCM_CTR_V2 = "aes256_gcm_ctr_v2";

    /// gcm.cu: H, the GHASH tables and the piece index.
    GcmSetupArgs {
        rk: DevPtr<u32>,
        segs: DevPtr<GcmSeg>,
        nsegs: u32,
        piece_blocks: u32,
        work: DevPtr<u8>,
    } => GCM_SETUP = "gcm_setup", GCM_SETUP_WIDE = "gcm_setup_wide";

    /// gcm.cu: the parallel GHASH of AAD and ciphertext.
    GcmGhashArgs {
        segs: DevPtr<GcmSeg>,
        nsegs: u32,
        data: DevPtr<u8>,
        aad: DevPtr<u8>,
        piece_blocks: u32,
        work: DevPtr<u8>,
    } => GCM_GHASH = "gcm_ghash", GCM_GHASH_WIDE = "gcm_ghash_wide";

    /// gcm.cu: the length block, E(J0) and the tags.
    GcmFinalizeArgs {
        rk: DevPtr<u32>,
        segs: DevPtr<GcmSeg>,
        nsegs: u32,
        work: DevPtr<u8>,
        tags_out: DevPtr<u8>,
    } => GCM_FINALIZE = "gcm_finalize";

    /// blake3.cu: every 1 KiB chunk's chaining value (or a one-chunk
    /// segment's digest).
    B3ChunksArgs {
        key_in: DevPtr<u32>,
        flags: u32,
        data: DevPtr<u8>,
        pieces: DevPtr<B3Piece>,
        npieces: u32,
        total_chunks: u64,
        cvs: DevPtr<u32>,
        digests: DevPtr<u32>,
    } => BLAKE3_CHUNKS = "blake3_chunks";

    /// blake3.cu: `blake3_chunks` plus the CRC-32C of every chunk (`crcs`)
    /// or one-chunk segment (`crc_out`), by table scheme.
    B3ChunksCrcArgs {
        key_in: DevPtr<u32>,
        flags: u32,
        data: DevPtr<u8>,
        pieces: DevPtr<B3Piece>,
        npieces: u32,
        total_chunks: u64,
        cvs: DevPtr<u32>,
        digests: DevPtr<u32>,
        crcs: DevPtr<u32>,
        crc_out: DevPtr<u32>,
    } => BLAKE3_CHUNKS_CRC32C = "blake3_chunks_crc32c",
        BLAKE3_CHUNKS_CRC32C_REP2 = "blake3_chunks_crc32c_rep2",
        BLAKE3_CHUNKS_CRC32C_REP4 = "blake3_chunks_crc32c_rep4";

    /// blake3.cu: one reduce level.
    B3ReduceArgs {
        key_in: DevPtr<u32>,
        flags: u32,
        levels: DevPtr<B3Level>,
        nlevels: u32,
        total_groups: u64,
        cvs_in: DevPtr<u32>,
        cvs_out: DevPtr<u32>,
        digests: DevPtr<u32>,
    } => BLAKE3_REDUCE = "blake3_reduce";

    /// blake3.cu: one reduce level with the CRC-32C registers.
    B3ReduceCrcArgs {
        key_in: DevPtr<u32>,
        flags: u32,
        levels: DevPtr<B3Level>,
        nlevels: u32,
        total_groups: u64,
        cvs_in: DevPtr<u32>,
        cvs_out: DevPtr<u32>,
        digests: DevPtr<u32>,
        crc_in: DevPtr<u32>,
        crc_out: DevPtr<u32>,
        crc_final: DevPtr<u32>,
    } => BLAKE3_REDUCE_CRC32C = "blake3_reduce_crc32c";

    /// cdc.cu: the gear-hash candidate bitmaps of one segment.
    GearArgs {
        data: DevPtr<u8>,
        len: u64,
        mask_s: u64,
        mask_l: u64,
        hits_s: DevPtr<u32>,
        hits_l: DevPtr<u32>,
    } => GEAR_CANDIDATES = "gear_candidates";

    /// cdc.cu: one level of the find-next index.
    SummarizeArgs {
        lo_s: DevPtr<u32>,
        lo_l: DevPtr<u32>,
        n_lo: u64,
        up_s: DevPtr<u32>,
        up_l: DevPtr<u32>,
    } => CDC_SUMMARIZE = "cdc_summarize";

    /// cdc.cu: the boundary resolution passes.
    CdcArgs {
        job: DevPtr<CdcJob>,
        segs: DevPtr<CdcSeg>,
        nsegs: u32,
        nsections: u64,
        lists: DevPtr<u32>,
        secs: DevPtr<CdcSec>,
        fails: DevPtr<u32>,
        flags: DevPtr<u32>,
    } => CDC_WALK = "cdc_walk", CDC_SYNC = "cdc_sync", CDC_FIXUP = "cdc_fixup";

    /// fused.cu: checks and counts every section's chunks.
    FusedCountArgs {
        job: DevPtr<CdcJob>,
        segs: DevPtr<CdcSeg>,
        nsegs: u32,
        nsections: u64,
        lists: DevPtr<u32>,
        secs: DevPtr<CdcSec>,
        stats: DevPtr<FusedStat>,
        head: DevPtr<u64>,
    } => FUSED_COUNT = "fused_count";

    /// fused.cu: prefix sums of the counts, and the totals.
    FusedScanArgs {
        stats: DevPtr<FusedStat>,
        nsections: u64,
        overflow: DevPtr<u32>,
        head: DevPtr<u64>,
    } => FUSED_SCAN = "fused_scan";

    /// fused.cu: the BLAKE3 descriptors of every chunk.
    FusedScatterArgs {
        job: DevPtr<CdcJob>,
        segs: DevPtr<CdcSeg>,
        nsegs: u32,
        nsections: u64,
        lists: DevPtr<u32>,
        secs: DevPtr<CdcSec>,
        stats: DevPtr<FusedStat>,
        nchunks: u64,
        crc: u32,
        pieces: DevPtr<B3Piece>,
        levels: DevPtr<B3Level>,
        offsets: DevPtr<u64>,
        lens: DevPtr<u32>,
    } => FUSED_SCATTER = "fused_scatter";

    /// serial.cu: one thread per piece, state carried between launches.
    SerialArgs {
        data: DevPtr<u8>,
        pieces: DevPtr<SerialPiece>,
        npieces: u32,
        state: DevPtr<u32>,
        digests: DevPtr<u32>,
    } => SHA256_PIECES = "sha256_pieces", MD5_PIECES = "md5_pieces",
        CRC32_PIECES = "crc32_pieces", CRC32C_PIECES = "crc32c_pieces";

    /// seed001.cu: sliding-window MD5 matched against sorted patterns.
    SlidingMd5Args {
        data: DevPtr<u8>,
        window: u64,
        step: u64,
        nwin: u64,
        patterns: DevPtr<u64>,
        npat: u32,
        out: DevPtr<u64>,
        count: DevPtr<u64>,
        cap: u64,
    } => SLIDING_MD5 = "sliding_md5";

    /// rsa.cu: CRT private-key operations, one launch per key size.
    RsaCrtArgs {
        keys: DevPtr<u32>,
        msg_key: DevPtr<u32>,
        input: DevPtr<u32>,
        output: DevPtr<u32>,
        nmsgs: u32,
    } => RSA_CRT_T1024 = "rsa_crt_t1024", RSA_CRT_T2048 = "rsa_crt_t2048",
        RSA_CRT_T4096 = "rsa_crt_t4096";
}

#[cfg(test)]
#[path = "launch_tests.rs"]
mod tests;
