//! Which rank keeps which parameters' optimizer state under ZeRO stage 1 (Rajbhandari et al., "ZeRO:
//! Memory Optimizations Toward Training Trillion Parameter Models", SC 2020, arXiv:1910.02054): each
//! trained tensor's AdamW state (moments, f32 master) lives on exactly one rank, its owner, which
//! alone updates it and then broadcasts the new values (docs/distributed.md).
//!
//! Whole tensors are assigned, not slices of a flat buffer: every tensor keeps its own update kernel
//! and its state keeps the names and shapes of an unsharded run's checkpoint.

/// The owner of each trained tensor, in the optimizer's order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Partition {
    owners: Vec<usize>,
    world: usize,
}

impl Partition {
    /// Assigns tensors of `sizes` elements to `world` ranks, balanced by elements: largest first
    /// (ties by position), each to the rank holding the fewest elements so far (ties: the lowest
    /// rank), the longest-processing-time rule, which ends within 4/3 of the best balance. It
    /// depends on the sizes and their order alone, so every rank computes the same partition.
    pub fn balanced(sizes: &[i64], world: usize) -> Self {
        let world = world.max(1);
        let mut order: Vec<usize> = (0..sizes.len()).collect();
        order.sort_by_key(|&i| (std::cmp::Reverse(sizes[i]), i));
        let mut load = vec![0i64; world];
        let mut owners = vec![0; sizes.len()];
        for i in order {
            let rank = (0..world).min_by_key(|&r| (load[r], r)).unwrap_or(0);
            owners[i] = rank;
            load[rank] += sizes[i];
        }
        Self { owners, world }
    }

    /// The rank that keeps tensor `i`'s state.
    pub fn owner(&self, i: usize) -> usize {
        self.owners[i]
    }

    /// Tensors in the partition.
    pub fn len(&self) -> usize {
        self.owners.len()
    }

    pub fn is_empty(&self) -> bool {
        self.owners.is_empty()
    }

    pub fn world_size(&self) -> usize {
        self.world
    }

    /// The elements of `sizes` that `rank` owns.
    pub fn elements_of(&self, sizes: &[i64], rank: usize) -> i64 {
        sizes
            .iter()
            .zip(&self.owners)
            .filter(|&(_, &owner)| owner == rank)
            .map(|(size, _)| size)
            .sum()
    }
}

/// One rank's place in a [`Partition`]: what [`crate::optim::AdamW::sharded`] keeps state for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shard {
    pub partition: Partition,
    pub rank: usize,
}

impl Shard {
    /// Whether this rank keeps tensor `i`'s state.
    pub fn owns(&self, i: usize) -> bool {
        self.partition.owner(i) == self.rank
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tensor_has_one_owner_and_the_loads_balance() {
        // Largest first, each to the lighter rank: 100 → 0; 60 → 1; 50 → 1 (60 < 100); 40 → 0
        // (100 < 110); 10 (index 0) → 1 (110 < 140); 10 (index 5) → 1 (120 < 140).
        let sizes = [10, 100, 40, 60, 50, 10];
        let p = Partition::balanced(&sizes, 2);
        let owners: Vec<usize> = (0..sizes.len()).map(|i| p.owner(i)).collect();
        assert_eq!(owners, [1, 0, 0, 1, 1, 1]);
        assert_eq!((p.elements_of(&sizes, 0), p.elements_of(&sizes, 1)), (140, 130));
        let total: i64 = sizes.iter().sum();
        assert_eq!(p.elements_of(&sizes, 0) + p.elements_of(&sizes, 1), total);
    }

    #[test]
    fn the_partition_depends_on_the_sizes_alone() {
        let sizes: Vec<i64> = (0..57).map(|i| (i * 7919 % 113 + 1) * 1000).collect();
        for world in [1, 2, 3, 4, 8] {
            let p = Partition::balanced(&sizes, world);
            assert_eq!(p, Partition::balanced(&sizes, world));
            assert_eq!(p.len(), sizes.len());
            let loads: Vec<i64> = (0..world).map(|r| p.elements_of(&sizes, r)).collect();
            assert_eq!(loads.iter().sum::<i64>(), sizes.iter().sum::<i64>());
            // The rule's bound: no rank exceeds the mean by more than the largest tensor.
            let mean = sizes.iter().sum::<i64>() / world as i64;
            let largest = *sizes.iter().max().unwrap();
            assert!(loads.iter().all(|&l| l <= mean + largest), "{world}: {loads:?}");
            assert!((0..p.len()).all(|i| p.owner(i) < world));
        }
    }

    #[test]
    fn ties_go_to_the_lower_rank_and_one_rank_owns_everything() {
        let p = Partition::balanced(&[5, 5, 5, 5], 2);
        assert_eq!((0..4).map(|i| p.owner(i)).collect::<Vec<_>>(), [0, 1, 0, 1]);
        let one = Partition::balanced(&[3, 1, 2], 1);
        assert!((0..3).all(|i| one.owner(i) == 0));
        let shard = Shard {
            partition: p,
            rank: 1,
        };
        assert_eq!(
            (0..4).map(|i| shard.owns(i)).collect::<Vec<_>>(),
            [false, true, false, true]
        );
    }
}
