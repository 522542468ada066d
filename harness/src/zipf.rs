//! Key sequences for `zipf`: ranks drawn from a Zipf distribution.

use rand::rngs::SmallRng;
use rand::SeedableRng;
use rand_distr::{Distribution, Zipf};

/// Distinct keys in `zipf`.
pub const ZIPF_KEYS: usize = 10_000;
/// The Zipf exponent of `zipf`.
pub const ZIPF_S: f64 = 1.0;

/// `len` ranks (0-based, below [`ZIPF_KEYS`]) drawn Zipf(s = [`ZIPF_S`]);
/// the same `seed` gives the same ranks, so every design meets the same
/// sequence.
pub fn ranks(seed: u64, len: usize) -> Vec<usize> {
    let zipf = Zipf::new(ZIPF_KEYS as f64, ZIPF_S).expect("n >= 1 and s >= 0");
    let mut rng = SmallRng::seed_from_u64(seed);
    // Zipf draws 1..=n as a float.
    (0..len)
        .map(|_| zipf.sample(&mut rng) as usize - 1)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_one_is_most_likely_and_seeds_repeat() {
        let draws = ranks(7, 200_000);
        let mut counts = vec![0u32; ZIPF_KEYS];
        for &r in &draws {
            counts[r] += 1;
        }
        // P(rank 1) = 1 / H(10000) ~ 0.1022 for s = 1.
        let p1 = counts[0] as f64 / draws.len() as f64;
        assert!((p1 - 0.1022).abs() < 0.01, "p1 = {p1}");
        assert!(counts[0] > counts[1] && counts[1] > counts[9]);
        assert_eq!(ranks(7, 100), draws[..100]);
        assert_ne!(ranks(8, 100), draws[..100]);
    }
}
