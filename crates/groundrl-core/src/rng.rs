//! Seeded randomness, in one place, with no dependency: SplitMix64.
//!
//! Splits, subsamples and synthetic data must come out the same for the same seed on every machine and
//! every version of this crate, so the generator is written down here rather than borrowed from a
//! crate whose stream may change between releases. SplitMix64 (Steele, Lea and Flood, "Fast splittable
//! pseudorandom number generators", OOPSLA 2014; the seeder of the xoshiro family) passes BigCrush and is
//! ten lines long. It is not cryptographic.
//!
//! ```
//! use groundrl_core::rng::SplitMix64;
//! let mut rng = SplitMix64::new(7);
//! let mut cards = [1, 2, 3, 4, 5];
//! rng.shuffle(&mut cards);
//! assert_eq!(SplitMix64::new(7).next_u64(), SplitMix64::new(7).next_u64());
//! ```

/// The SplitMix64 generator: a 64-bit counter passed through a bijective mixing function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SplitMix64 {
    state: u64,
}

const GOLDEN_GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

/// SplitMix64's output function: a bijection on u64 that spreads every input bit over every output bit.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(GOLDEN_GAMMA);
        mix(self.state)
    }

    /// Uniform in [0, 1), with the 53 bits a double holds.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `0..n`, without modulo bias (rejection of the incomplete last block). `n` must be > 0.
    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0, "SplitMix64::below needs a positive bound");
        let zone = u64::MAX - (u64::MAX % n);
        loop {
            let v = self.next_u64();
            if v < zone {
                return v % n;
            }
        }
    }

    /// Fisher-Yates shuffle in place.
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            items.swap(i, j);
        }
    }
}

/// A number fixed by `seed` and `key` alone (FNV-1a of the key, mixed with the seed).
///
/// Ordering records by `keyed(seed, id)` gives a random order that does not depend on the records'
/// position in a file nor on which other records are present: the basis of prefix-stable subsamples.
pub fn keyed(seed: u64, key: &str) -> u64 {
    const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;
    let hash = key
        .bytes()
        .fold(FNV_OFFSET, |h, b| (h ^ u64::from(b)).wrapping_mul(FNV_PRIME));
    mix(mix(seed.wrapping_add(GOLDEN_GAMMA)) ^ hash)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_published_splitmix64_outputs() {
        // Reference outputs of Vigna's splitmix64.c for seed 1234567.
        let mut rng = SplitMix64::new(1234567);
        let got: Vec<u64> = (0..5).map(|_| rng.next_u64()).collect();
        assert_eq!(
            got,
            [
                6457827717110365317,
                3203168211198807973,
                9817491932198370423,
                4593380528125082431,
                16408922859458223821
            ]
        );
    }

    #[test]
    fn below_stays_in_range_and_shuffle_permutes() {
        let mut rng = SplitMix64::new(3);
        assert!((0..1000).all(|_| rng.below(7) < 7));
        let mut v: Vec<u32> = (0..50).collect();
        rng.shuffle(&mut v);
        assert_ne!(v, (0..50).collect::<Vec<_>>());
        v.sort();
        assert_eq!(v, (0..50).collect::<Vec<_>>());
        let f = rng.next_f64();
        assert!((0.0..1.0).contains(&f));
    }

    #[test]
    fn keyed_depends_on_seed_and_key() {
        assert_eq!(keyed(1, "a"), keyed(1, "a"));
        assert_ne!(keyed(1, "a"), keyed(2, "a"));
        assert_ne!(keyed(1, "a"), keyed(1, "b"));
    }
}
