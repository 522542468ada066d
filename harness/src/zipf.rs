//! Key sequences for `zipf`: a Zipf sampler and a small seeded generator.

/// A Zipf sampler over `1..=n` with exponent `s`, by inverse CDF (binary search).
pub struct Zipf {
    cdf: Vec<f64>,
}

impl Zipf {
    pub fn new(n: usize, s: f64) -> Self {
        let mut cdf = Vec::with_capacity(n);
        let mut acc = 0.0;
        for k in 1..=n {
            acc += 1.0 / (k as f64).powf(s);
            cdf.push(acc);
        }
        for c in &mut cdf {
            *c /= acc;
        }
        Zipf { cdf }
    }
    /// Rank (0-based) for a uniform `u` in [0, 1).
    pub fn sample(&self, u: f64) -> usize {
        self.cdf.partition_point(|&c| c < u).min(self.cdf.len() - 1)
    }
}

/// xorshift64*: enough randomness for key sequences.
pub struct Rng(u64);
impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Distinct keys in `zipf`.
pub const ZIPF_KEYS: usize = 10_000;
/// The Zipf exponent of `zipf`.
pub const ZIPF_S: f64 = 1.0;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zipf_rank_one_is_most_likely() {
        let z = Zipf::new(ZIPF_KEYS, ZIPF_S);
        let mut rng = Rng::new(7);
        let mut counts = vec![0u32; ZIPF_KEYS];
        for _ in 0..200_000 {
            counts[z.sample(rng.unit())] += 1;
        }
        // P(rank 1) = 1 / H(10000) ~ 0.1022 for s = 1.
        let p1 = counts[0] as f64 / 200_000.0;
        assert!((p1 - 0.1022).abs() < 0.01, "p1 = {p1}");
        assert!(counts[0] > counts[1] && counts[1] > counts[9]);
        assert_eq!(z.sample(0.0), 0);
        assert_eq!(z.sample(0.999_999_999), ZIPF_KEYS - 1);
    }
}
