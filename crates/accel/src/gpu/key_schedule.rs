//! Host-side key schedules handed to the kernels: AES-256 key expansion
//! (FIPS-197 §5.2). aws-lc does not expose its expanded keys, and the
//! kernels need the 60 round-key words in FIPS order.

const SBOX: [u8; 256] = {
    // Generated from the multiplicative inverse in GF(2^8) and the affine map,
    // at compile time, so there is no hand-typed table to get wrong.
    let mut sbox = [0u8; 256];
    let mut p: u8 = 1;
    let mut q: u8 = 1;
    loop {
        // p := p * 3
        p = p ^ (p << 1) ^ (if p & 0x80 != 0 { 0x1b } else { 0 });
        // q := q / 3
        q ^= q << 1;
        q ^= q << 2;
        q ^= q << 4;
        if q & 0x80 != 0 {
            q ^= 0x09;
        }
        let x = q ^ q.rotate_left(1) ^ q.rotate_left(2) ^ q.rotate_left(3) ^ q.rotate_left(4);
        sbox[p as usize] = x ^ 0x63;
        if p == 1 {
            break;
        }
    }
    sbox[0] = 0x63;
    sbox
};

/// The 60 words of the AES-256 key schedule, word i = big-endian bytes 4i..4i+3.
pub fn aes256_expand(key: &[u8; 32]) -> [u32; 60] {
    let mut w = [0u32; 60];
    for i in 0..8 {
        w[i] = u32::from_be_bytes([key[4 * i], key[4 * i + 1], key[4 * i + 2], key[4 * i + 3]]);
    }
    let sub = |x: u32| {
        let b = x.to_be_bytes();
        u32::from_be_bytes([
            SBOX[b[0] as usize],
            SBOX[b[1] as usize],
            SBOX[b[2] as usize],
            SBOX[b[3] as usize],
        ])
    };
    let mut rcon: u32 = 0x0100_0000;
    for i in 8..60 {
        let mut t = w[i - 1];
        if i % 8 == 0 {
            t = sub(t.rotate_left(8)) ^ rcon;
            let r = (rcon >> 24) as u8;
            rcon = ((r << 1) ^ if r & 0x80 != 0 { 0x1b } else { 0 }) as u32;
            rcon <<= 24;
        } else if i % 8 == 4 {
            t = sub(t);
        }
        w[i] = w[i - 8] ^ t;
    }
    w
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sbox_spot_values() {
        assert_eq!(SBOX[0x00], 0x63);
        assert_eq!(SBOX[0x01], 0x7c);
        assert_eq!(SBOX[0x53], 0xed);
        assert_eq!(SBOX[0xff], 0x16);
    }

    #[test]
    fn fips197_appendix_a3_expansion() {
        let key: [u8; 32] = [
            0x60, 0x3d, 0xeb, 0x10, 0x15, 0xca, 0x71, 0xbe, 0x2b, 0x73, 0xae, 0xf0, 0x85, 0x7d,
            0x77, 0x81, 0x1f, 0x35, 0x2c, 0x07, 0x3b, 0x61, 0x08, 0xd7, 0x2d, 0x98, 0x10, 0xa3,
            0x09, 0x14, 0xdf, 0xf4,
        ];
        let w = aes256_expand(&key);
        assert_eq!(w[8], 0x9ba35411);
        assert_eq!(w[9], 0x8e6925af);
        assert_eq!(w[12], 0xa8b09c1a);
        assert_eq!(w[59], 0x706c631e);
    }
}
