//! What the kernels and the Rust launch code must agree on, in one place:
//! the descriptor structs the kernels read, and the constants both sides
//! use (per-thread unit counts, table sizes, list and flag layouts).
//!
//! Rust is the source of truth. [`header`] renders these as the NVRTC
//! header `abi.cuh` (`#define`s, plus compile-time checks of every
//! struct's layout), which `kernels.rs` supplies to every .cu file that
//! includes it; so no .cu file holds a copy of a value defined here.
//! The Rust side pins each struct's layout with compile-time asserts on the
//! literal sizes and offsets written below. NVRTC has no `offsetof`, so the
//! C side checks the same layout through what determines it: the struct's
//! size, each field's size, and the field order (an aggregate initialised
//! in Rust's order must put value k in field k); with C's layout rules,
//! which `repr(C)` follows, equal order and sizes mean equal offsets.

use std::fmt::Write as _;

/// Declares `#[repr(C)]` descriptor structs with their C layout: the size
/// and each field's offset are asserted at compile time, and `header()`
/// turns the same layout into checks of the C struct of the same name and
/// field names (`GV_CHECK_LAYOUT(Name);` after its definition). A field
/// marked `(ptr)` is a pointer (or array of pointers) in C.
macro_rules! abi_structs {
    ($(
        $(#[$meta:meta])*
        pub(crate) struct $name:ident ($size:literal bytes) {
            $($(#[$fmeta:meta])* $fvis:vis $field:ident : $ty:ty = @ $off:literal $(($ptr:ident))?),* $(,)?
        }
    )*) => {
        $(
            $(#[$meta])*
            #[repr(C)]
            #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
            pub(crate) struct $name {
                $($(#[$fmeta])* $fvis $field: $ty),*
            }

            const _: () = {
                assert!(std::mem::size_of::<$name>() == $size);
                $(assert!(std::mem::offset_of!($name, $field) == $off);)*
            };

            impl super::launch::CName for $name {
                const C_NAME: &'static str = stringify!($name);
            }
        )*

        /// Each struct: its name, size and fields.
        pub(crate) const LAYOUTS: &[(&str, usize, &[Field])] = &[
            $((stringify!($name), $size, &[$(Field {
                name: stringify!($field),
                size: std::mem::size_of::<$ty>(),
                array: <$ty as FieldKind>::ARRAY,
                ptr: !stringify!($($ptr)?).is_empty(),
            }),*])),*
        ];
    };
}

abi_structs! {
    /// A segment of a CTR job (ctr_common.cuh): `len` bytes at `data +
    /// offset`, whose first unit is unit `first_unit` of the job and uses
    /// counter block `iv`.
    pub(crate) struct CipherSeg (40 bytes) {
        pub offset: u64 = @0,
        pub len: u64 = @8,
        pub first_unit: u64 = @16,
        /// 8-byte aligned, so the kernels load it as two u64.
        pub iv: [u8; 16] = @24,
    }

    /// A segment of a GCM job (gcm.cu).
    pub(crate) struct GcmSeg (56 bytes) {
        pub offset: u64 = @0,
        pub len: u64 = @8,
        pub first_unit: u64 = @16,
        pub aad_offset: u64 = @24,
        pub aad_len: u64 = @32,
        pub nonce: [u8; 12] = @40,
        pub reserved: u32 = @52,
    }

    /// A piece of a BLAKE3 segment (blake3.cu).
    pub(crate) struct B3Piece (40 bytes) {
        pub offset: u64 = @0,
        pub len: u64 = @8,
        pub first_chunk: u64 = @16,
        pub counter: u64 = @24,
        pub seg: u32 = @32,
        pub root: u32 = @36,
    }

    /// One segment at one level of the BLAKE3 reduce (blake3.cu).
    pub(crate) struct B3Level (40 bytes) {
        pub first_in: u64 = @0,
        pub count: u64 = @8,
        pub first_out: u64 = @16,
        pub seg: u32 = @24,
        /// x^(8 |node|) mod the CRC-32C polynomial for a full node at this level.
        pub crc_full: u32 = @28,
        /// The same for the segment's last node at this level.
        pub crc_last: u32 = @32,
        pub pad: u32 = @36,
    }

    /// A piece of a segment of the serial hashes (serial.cu).
    pub(crate) struct SerialPiece (32 bytes) {
        pub offset: u64 = @0,
        pub len: u64 = @8,
        pub total_len: u64 = @16,
        pub seg: u32 = @24,
        /// SP_FIRST | SP_LAST.
        pub flags: u32 = @28,
    }

    /// The boundary resolution's job (cdc.cu).
    pub(crate) struct CdcJob (120 bytes) {
        pub min: u64 = @0,
        pub avg: u64 = @8,
        pub max: u64 = @16,
        pub mask_s: u64 = @24,
        pub mask_l: u64 = @32,
        pub section: u64 = @40,
        pub lv_s: [u64; CDC_LEVELS] = @48 (ptr),
        pub lv_l: [u64; CDC_LEVELS] = @80 (ptr),
        pub cap: u32 = @112,
        pub pad: u32 = @116,
    }

    /// A segment of the boundary resolution (cdc.cu).
    pub(crate) struct CdcSeg (32 bytes) {
        pub data: u64 = @0 (ptr),
        pub len: u64 = @8,
        pub bit0: u64 = @16,
        pub first_section: u64 = @24,
    }

    /// A section's walk (cdc.cu).
    pub(crate) struct CdcSec (16 bytes) {
        pub n: u32 = @0,
        pub v: u32 = @4,
        pub e: u32 = @8,
        pub pad: u32 = @12,
    }

    /// A section's counts in the device-built chunk list (fused.cu).
    pub(crate) struct FusedStat (64 bytes) {
        pub chunks: u64 = @0,
        pub kib: u64 = @8,
        pub groups: [u64; FUSED_LEVELS] = @16,
    }
}

/// Counter units a thread of `aes256_ctr` and `aes256_gcm_ctr` takes per
/// grid step (two block chains keep the 1024-thread kernels within their
/// 64 registers).
pub(crate) const AES_CTR_K: u32 = 2;
/// The same for `aes256_ctr_v2` and `aes256_gcm_ctr_v2`.
pub(crate) const AES_CTR_V2_K: u32 = 2;
/// The same for `tea_ctr`: four TEA chains hide the add/xor latency.
pub(crate) const TEA_CTR_K: u32 = 4;
/// The same for `blowfish_ctr` and `blowfish_ctr_v2`.
pub(crate) const BF_CTR_K: u32 = 2;
pub(crate) const BF_CTR_V2_K: u32 = 2;
/// Dynamic shared memory of the 1024-thread table kernels: AES's Te0..Te3
/// and Blowfish's S-boxes, each replicated 32 times (one copy a bank).
pub(crate) const AES_TAB_X32X4_BYTES: u32 = 131072;
pub(crate) const BF_X32_BYTES: u32 = 131072;
/// Dynamic shared memory of the GHASH kernels: 32 nibble positions x 16
/// values x 8 copies x 16 bytes of multiples of H.
pub(crate) const GCM_GHASH_SMEM_BYTES: u32 = 65536;
/// Byte offset of the piece index in the GCM work buffer; the GHASH tables
/// and H lie before it, the accumulators after it (gcm.cu).
pub(crate) const GCM_W_PIECES: u32 = 16384;
/// Dynamic shared memory per pair of replicated CRC-32C tables in the
/// fused BLAKE3 kernels (`_rep2`: one pair, `_rep4`: two).
pub(crate) const B3_CRC_REP_PAIR_BYTES: u32 = 65536;
/// Chaining values a BLAKE3 reduce thread merges (one group).
pub(crate) const B3_GROUP: u64 = 16;
/// `SerialPiece::flags`: the first / last piece of its segment.
pub(crate) const SP_FIRST: u32 = 1;
pub(crate) const SP_LAST: u32 = 2;
/// Positions per `gear_candidates` thread.
pub(crate) const GEAR_SPAN: u64 = 512;
/// Bytes a lane of `gear_candidates` stages its loads in (2 tiles of 64
/// bytes and 16 of bank skew), and so a warp.
pub(crate) const GEAR_ROW: u32 = 144;
pub(crate) const GEAR_STAGE_WARP: u32 = 32 * GEAR_ROW;
/// Levels of the candidate bitmaps' find-next index.
pub(crate) const CDC_LEVELS: usize = 4;
/// Steps a junction walk may take into the next section before it fails.
pub(crate) const CDC_TAIL: u32 = 64;
/// `CdcSec::v` of a section whose junction failed.
pub(crate) const CDC_FAIL: u32 = u32::MAX;
/// Reduce levels of a chunk under 4 GiB (2^22 KiB < 16^6).
pub(crate) const FUSED_LEVELS: usize = 6;
/// Words of the fused job's head: the `FusedStat` totals, then the index
/// of the highest bad section plus one, then the list overflow flag.
pub(crate) const FUSED_FIELDS: usize = 2 + FUSED_LEVELS;
pub(crate) const FUSED_BAD: usize = FUSED_FIELDS;
pub(crate) const FUSED_OVERFLOW: usize = FUSED_FIELDS + 1;
pub(crate) const FUSED_HEAD_WORDS: usize = FUSED_FIELDS + 2;
/// Threads of the one-block `fused_scan`.
pub(crate) const FUSED_SCAN_BLOCK: u32 = 256;

const _: () = assert!(std::mem::size_of::<FusedStat>() == FUSED_FIELDS * 8);

/// A field of a descriptor struct, as the C checks need it.
pub(crate) struct Field {
    pub name: &'static str,
    pub size: usize,
    /// An array (initialised and read through its first element).
    pub array: bool,
    /// A pointer in C (initialised to null and not read back: its
    /// neighbours' types and values pin its place).
    pub ptr: bool,
}

/// Whether a field type is an array.
trait FieldKind {
    const ARRAY: bool;
}
impl FieldKind for u32 {
    const ARRAY: bool = false;
}
impl FieldKind for u64 {
    const ARRAY: bool = false;
}
impl<T, const N: usize> FieldKind for [T; N] {
    const ARRAY: bool = true;
}

/// How a constant is spelled in C: the suffix keeps the C type of the
/// literal the kernels were written for.
enum CLit {
    /// `int`
    Int(u64),
    /// `unsigned int` (`u`)
    U32(u32),
    /// `unsigned long long` (`ull`)
    U64(u64),
}

/// The constants the kernels see, by their C names.
fn defines() -> Vec<(&'static str, CLit)> {
    use CLit::*;
    vec![
        ("GV_AES_CTR_K", Int(AES_CTR_K as u64)),
        ("GV_AES_CTR_V2_K", Int(AES_CTR_V2_K as u64)),
        ("GV_TEA_K", Int(TEA_CTR_K as u64)),
        ("GV_BF_K", Int(BF_CTR_K as u64)),
        ("GV_BF_V2_K", Int(BF_CTR_V2_K as u64)),
        ("GV_AES_TAB_X32X4_BYTES", U32(AES_TAB_X32X4_BYTES)),
        ("GV_BF_X32_BYTES", U32(BF_X32_BYTES)),
        ("GV_GCM_GHASH_SMEM_BYTES", U32(GCM_GHASH_SMEM_BYTES)),
        ("GV_GCM_W_PIECES", U32(GCM_W_PIECES)),
        ("B3_CRC_REP_PAIR_BYTES", U32(B3_CRC_REP_PAIR_BYTES)),
        ("B3_GROUP", Int(B3_GROUP)),
        ("SP_FIRST", U32(SP_FIRST)),
        ("SP_LAST", U32(SP_LAST)),
        ("GEAR_SPAN", U64(GEAR_SPAN)),
        ("GEAR_ROW", U32(GEAR_ROW)),
        ("GEAR_STAGE_WARP", U32(GEAR_STAGE_WARP)),
        ("CDC_LEVELS", Int(CDC_LEVELS as u64)),
        ("CDC_TAIL", U32(CDC_TAIL)),
        ("CDC_FAIL", U32(CDC_FAIL)),
        ("FUSED_LEVELS", Int(FUSED_LEVELS as u64)),
        ("FUSED_FIELDS", Int(FUSED_FIELDS as u64)),
        ("FUSED_BAD", Int(FUSED_BAD as u64)),
        ("FUSED_OVERFLOW", Int(FUSED_OVERFLOW as u64)),
        ("FUSED_SCAN_BLOCK", Int(FUSED_SCAN_BLOCK as u64)),
    ]
}

/// The name the kernels include the generated header by.
pub(crate) const HEADER_NAME: &str = "abi.cuh";

/// The text of `abi.cuh`: every constant above as a `#define`, and for each
/// descriptor struct a `GV_LAYOUT_<Name>` macro that checks its layout
/// (see the module's text), which `GV_CHECK_LAYOUT(Name)` expands.
pub(crate) fn header() -> String {
    let mut h = String::from(
        "// abi.cuh -- generated from crates/accel/src/gpu/abi.rs; do not edit.\n\
         #ifndef GV_ABI_CUH\n#define GV_ABI_CUH\n",
    );
    for (name, value) in defines() {
        let _ = match value {
            CLit::Int(v) => writeln!(h, "#define {name} {v}"),
            CLit::U32(v) => writeln!(h, "#define {name} {v}u"),
            CLit::U64(v) => writeln!(h, "#define {name} {v}ull"),
        };
    }
    h.push_str("#define GV_CHECK_LAYOUT(S) GV_LAYOUT_##S\n");
    for (name, size, fields) in LAYOUTS {
        let mut checks = vec![format!(
            "static_assert(sizeof({name}) == {size}, \"{name}: size differs from gpu/abi.rs\")"
        )];
        let (mut init, mut read) = (Vec::new(), Vec::new());
        for (k, f) in fields.iter().enumerate() {
            let field = f.name;
            checks.push(format!(
                "static_assert(sizeof({name}::{field}) == {}, \"{name}.{field}: size differs from gpu/abi.rs\")",
                f.size
            ));
            let v = k + 1;
            match (f.ptr, f.array) {
                (true, _) => init.push("{}".to_string()),
                (false, true) => {
                    init.push(format!("{{{v}}}"));
                    read.push(format!("s.{field}[0] == {v}"));
                }
                (false, false) => {
                    init.push(v.to_string());
                    read.push(format!("s.{field} == {v}"));
                }
            }
        }
        let _ = writeln!(
            h,
            "#define GV_LAYOUT_{name} {}; \\\n    constexpr bool gv_order_{name}() {{ {name} s{{{}}}; return {}; }} \\\n    \
             static_assert(gv_order_{name}(), \"{name}: field order differs from gpu/abi.rs\")",
            checks.join("; "),
            init.join(", "),
            read.join(" && "),
        );
    }
    h.push_str("#endif  // GV_ABI_CUH\n");
    h
}

/// The name cdc.cu includes the gear table by.
pub(crate) const GEAR_HEADER_NAME: &str = "gear.cuh";

/// The text of `gear.cuh`: `CDC_GEAR`, fastcdc::v2020's gear table (seed
/// 0) in constant memory, taken from the crate that the CPU chunker and
/// the CPU twin of the boundary resolution (`cdc_resolve`) use.
pub(crate) fn gear_header() -> String {
    let (gear, _) = fastcdc::v2020::get_gear_with_seed(0);
    let mut h = String::from(
        "// gear.cuh -- generated from crates/accel/src/gpu/abi.rs; do not edit.\n\
         #ifndef GV_GEAR_CUH\n#define GV_GEAR_CUH\n\
         __constant__ unsigned long long CDC_GEAR[256] = {\n",
    );
    for row in gear.chunks(4) {
        let row: Vec<String> = row.iter().map(|g| format!("0x{g:016x}ull")).collect();
        let _ = writeln!(h, "    {},", row.join(", "));
    }
    h.push_str("};\n#endif  // GV_GEAR_CUH\n");
    h
}

/// The name fused.cu includes the CRC-32C shift table by.
pub(crate) const CRC_POW_HEADER_NAME: &str = "crc_pow.cuh";

/// The text of `crc_pow.cuh`: `B3_CRC_X8POW`, x^(8 * 2^k) modulo the
/// CRC-32C polynomial for k = 0..64, the table the host's `crc_shift` uses.
pub(crate) fn crc_pow_header() -> String {
    let mut h = String::from(
        "// crc_pow.cuh -- generated from crates/accel/src/gpu/abi.rs; do not edit.\n\
         #ifndef GV_CRC_POW_CUH\n#define GV_CRC_POW_CUH\n\
         __constant__ unsigned int B3_CRC_X8POW[64] = {\n",
    );
    for row in super::blake3::crc_pow2().chunks(8) {
        let row: Vec<String> = row.iter().map(|w| format!("0x{w:08x}u")).collect();
        let _ = writeln!(h, "    {},", row.join(", "));
    }
    h.push_str("};\n#endif  // GV_CRC_POW_CUH\n");
    h
}

#[cfg(test)]
mod tests {
    use super::{gear_header, header, LAYOUTS};

    #[test]
    fn the_gear_header_holds_fastcdcs_table_as_256_constants() {
        let h = gear_header();
        let values: Vec<u64> = h
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter_map(|w| w.strip_prefix("0x")?.strip_suffix("ull"))
            .map(|w| u64::from_str_radix(w, 16).expect("hex"))
            .collect();
        assert_eq!(values.len(), 256);
        // fastcdc::v2020's GEAR[0] and GEAR[255] (seed 0), as cdc.cu held them
        assert_eq!(values[0], 0x3b5d_3c7d_207e_37dc);
        assert_eq!(values[255], 0xaabd_2b2a_4515_04e1);
        assert!(h.contains("__constant__ unsigned long long CDC_GEAR[256] = {"));
    }

    #[test]
    fn the_header_defines_every_constant_once_and_checks_every_struct() {
        let h = header();
        let names: Vec<&str> = h
            .lines()
            .filter_map(|l| l.strip_prefix("#define "))
            .filter_map(|l| l.split_whitespace().next())
            .collect();
        let mut unique = names.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), names.len(), "a name is defined twice");
        assert!(h.contains("#define GEAR_SPAN 512ull\n"));
        assert!(h.contains("#define CDC_FAIL 4294967295u\n"));
        assert!(h.contains("#define FUSED_LEVELS 6\n"));
        let joined = h.replace("\\\n", "");
        for (name, _, fields) in LAYOUTS {
            let line = joined
                .lines()
                .find(|l| l.starts_with(&format!("#define GV_LAYOUT_{name} ")))
                .unwrap_or_else(|| panic!("no layout check for {name}"));
            // the struct's size, each field's size, the field order
            assert_eq!(line.matches("static_assert").count(), fields.len() + 2);
        }
        assert!(joined.contains(
            "constexpr bool gv_order_CipherSeg() { CipherSeg s{1, 2, 3, {4}}; \
             return s.offset == 1 && s.len == 2 && s.first_unit == 3 && s.iv[0] == 4; }"
        ));
    }
}
