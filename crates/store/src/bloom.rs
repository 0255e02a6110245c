//! Bloom filter over the user keys of a table, as LevelDB's bloom.cc: k
//! probes by double hashing, k stored in the last byte. A point lookup skips
//! the table when the filter says the key is absent.

pub fn key_hash(key: &[u8]) -> u32 {
    // LevelDB's Hash (murmur-like), seed 0xbc9f1d34.
    const M: u32 = 0xc6a4_a793;
    let mut h: u32 = 0xbc9f_1d34 ^ (key.len() as u32).wrapping_mul(M);
    let mut chunks = key.chunks_exact(4);
    for c in &mut chunks {
        h = h.wrapping_add(u32::from_le_bytes(c.try_into().expect("4 bytes")));
        h = h.wrapping_mul(M);
        h ^= h >> 16;
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        for (i, &b) in rest.iter().enumerate() {
            h = h.wrapping_add(u32::from(b) << (8 * i));
        }
        h = h.wrapping_mul(M);
        h ^= h >> 24;
    }
    h
}

pub fn build_filter(hashes: &[u32], bits_per_key: usize) -> Vec<u8> {
    let k = ((bits_per_key as f64 * 0.69) as usize).clamp(1, 30);
    let bits = (hashes.len() * bits_per_key).max(64);
    let bytes = bits.div_ceil(8);
    let bits = bytes * 8;
    let mut filter = vec![0u8; bytes + 1];
    for &h in hashes {
        let delta = h.rotate_right(17);
        let mut h = h;
        for _ in 0..k {
            let pos = h as usize % bits;
            filter[pos / 8] |= 1 << (pos % 8);
            h = h.wrapping_add(delta);
        }
    }
    filter[bytes] = k as u8;
    filter
}

pub fn may_contain(filter: &[u8], key: &[u8]) -> bool {
    if filter.len() < 2 {
        return true;
    }
    let bytes = filter.len() - 1;
    let bits = bytes * 8;
    let k = filter[bytes];
    if k == 0 || k > 30 {
        return true; // not a filter this build makes: do not skip
    }
    let mut h = key_hash(key);
    let delta = h.rotate_right(17);
    for _ in 0..k {
        let pos = h as usize % bits;
        if filter[pos / 8] & (1 << (pos % 8)) == 0 {
            return false;
        }
        h = h.wrapping_add(delta);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_false_negatives_and_few_false_positives() {
        let keys: Vec<Vec<u8>> = (0..10_000u32).map(|i| i.to_le_bytes().to_vec()).collect();
        let hashes: Vec<u32> = keys.iter().map(|k| key_hash(k)).collect();
        let f = build_filter(&hashes, 10);
        assert!(keys.iter().all(|k| may_contain(&f, k)));
        let fp = (10_000..20_000u32)
            .filter(|i| may_contain(&f, &i.to_le_bytes()))
            .count();
        assert!(fp < 300, "false positive rate too high: {fp}/10000");
    }
}
