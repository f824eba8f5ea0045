//! The few draws the generator makes, on the crate's seeded [`SplitMix64`] (stable across machines and
//! versions, so a seed names the same dataset forever).

use crate::rng::SplitMix64;

/// Draws on top of [`SplitMix64`].
pub trait Draws {
    /// Uniform integer in `lo..=hi`.
    fn between(&mut self, lo: usize, hi: usize) -> usize;
    /// Uniform in `lo..hi`.
    fn uniform(&mut self, lo: f32, hi: f32) -> f32;
    /// True with probability `p`.
    fn chance(&mut self, p: f64) -> bool;
    /// A uniformly chosen item; `None` when `items` is empty.
    fn pick<'a, T>(&mut self, items: &'a [T]) -> Option<&'a T>;
}

impl Draws for SplitMix64 {
    fn between(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below((hi - lo) as u64 + 1) as usize
    }

    fn uniform(&mut self, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * self.next_f64() as f32
    }

    fn chance(&mut self, p: f64) -> bool {
        self.next_f64() < p
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> Option<&'a T> {
        (!items.is_empty()).then(|| &items[self.below(items.len() as u64) as usize])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn between_covers_both_ends_and_nothing_else() {
        let mut rng = SplitMix64::new(5);
        let mut seen = [0; 4];
        for _ in 0..400 {
            seen[rng.between(1, 3)] += 1;
        }
        assert_eq!(seen[0], 0);
        assert!(seen[1..].iter().all(|&n| n > 90), "{seen:?}");
    }

    #[test]
    fn chance_zero_and_one_are_certain_and_pick_of_nothing_is_none() {
        let mut rng = SplitMix64::new(1);
        assert!((0..100).all(|_| !rng.chance(0.0) && rng.chance(1.0)));
        assert_eq!(rng.pick::<u8>(&[]), None);
        let u = rng.uniform(2.0, 3.0);
        assert!((2.0..3.0).contains(&u));
    }
}
