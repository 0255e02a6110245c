//! GF(2^128) arithmetic in GCM's bit order (NIST SP 800-38D, 6.3), for the
//! few steps that join partial GHASH sums of a cut segment. Elements are
//! 16-byte blocks read big-endian into a `u128`: the first byte's top bit
//! is the coefficient of x^0, so "one" is `1 << 127`.
//!
//! The bulk GHASH work runs in aws-lc; these run a handful of times per
//! piece, so a plain constant-time loop is enough (no tables indexed by
//! secret data: H is key material).

/// The reduction constant R = 11100001 || 0^120.
const R: u128 = 0xe1 << 120;

/// The multiplicative identity.
pub const ONE: u128 = 1 << 127;

/// x * y (SP 800-38D, Algorithm 1), in time independent of both operands.
pub fn mul(x: u128, y: u128) -> u128 {
    let mut z = 0u128;
    let mut v = y;
    for i in 0..128 {
        let bit = (x >> (127 - i)) & 1;
        z ^= v & 0u128.wrapping_sub(bit);
        let carry = v & 1;
        v = (v >> 1) ^ (R & 0u128.wrapping_sub(carry));
    }
    z
}

/// h^n by square-and-multiply (n is public: a block count).
pub fn pow(h: u128, mut n: u64) -> u128 {
    let mut acc = ONE;
    let mut base = h;
    while n > 0 {
        if n & 1 == 1 {
            acc = mul(acc, base);
        }
        base = mul(base, base);
        n >>= 1;
    }
    acc
}

/// A block as a field element.
pub fn from_block(b: &[u8; 16]) -> u128 {
    u128::from_be_bytes(*b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex16(s: &str) -> u128 {
        u128::from_str_radix(s, 16).unwrap()
    }

    /// GHASH_H over whole blocks by Horner's rule, for the vectors below.
    fn ghash(h: u128, blocks: &[u128]) -> u128 {
        blocks.iter().fold(0, |x, b| mul(x ^ b, h))
    }

    /// McGrew-Viega test case 2 (SP 800-38D's GCM spec, AES-128, zero key
    /// and IV, one zero block): H and the GHASH of C with its length block.
    #[test]
    fn ghash_matches_the_gcm_spec_test_case_2() {
        let h = hex16("66e94bd4ef8a2c3b884cfa59ca342b2e");
        let c = hex16("0388dace60b6a392f328c2b971b2fe78");
        let len = 128u128; // 0 bits of AAD, 128 bits of ciphertext
        assert_eq!(
            ghash(h, &[c, len]),
            hex16("f38cbb1ad69223dcc3457ae5b6b0f885")
        );
    }

    /// Test case 4 (AES-128, 60-byte plaintext, 20-byte AAD): the GHASH
    /// value the spec lists, from its H, A and C.
    #[test]
    fn ghash_matches_the_gcm_spec_test_case_4() {
        let h = hex16("b83b533708bf535d0aa6e52980d53b78");
        let a = [
            hex16("feedfacedeadbeeffeedfacedeadbeef"),
            hex16("abaddad2000000000000000000000000"),
        ];
        let c = [
            hex16("42831ec2217774244b7221b784d0d49c"),
            hex16("e3aa212f2c02a4e035c17e2329aca12e"),
            hex16("21d514b25466931c7d8f6a5aac84aa05"),
            hex16("1ba30b396a0aac973d58e09100000000"),
        ];
        let len = (160u128 << 64) | 480;
        let mut blocks = a.to_vec();
        blocks.extend(c);
        blocks.push(len);
        assert_eq!(ghash(h, &blocks), hex16("698e57f70e6ecc7fd9463b7260a9ae5f"));
    }

    #[test]
    fn field_laws_hold() {
        let a = hex16("66e94bd4ef8a2c3b884cfa59ca342b2e");
        let b = hex16("0388dace60b6a392f328c2b971b2fe78");
        let c = hex16("b83b533708bf535d0aa6e52980d53b78");
        assert_eq!(mul(a, ONE), a);
        assert_eq!(mul(a, b), mul(b, a));
        assert_eq!(mul(a, b ^ c), mul(a, b) ^ mul(a, c));
        assert_eq!(mul(mul(a, b), c), mul(a, mul(b, c)));
        assert_eq!(mul(a, 0), 0);
        assert_eq!(pow(a, 0), ONE);
        assert_eq!(pow(a, 1), a);
        let mut p = ONE;
        for n in 0..40u64 {
            assert_eq!(pow(a, n), p, "{n}");
            p = mul(p, a);
        }
        // x^128 = x^7 + x^2 + x + 1: the element x times x^127.
        let x = ONE >> 1;
        assert_eq!(mul(x, 1), R);
    }
}
