//! Id lookups for every record of a COCO-sized input (500,000 detections each look up an image and a
//! category): a table indexed by `id - min` when the ids are dense enough (COCO's are small
//! integers), a hash map with a cheap multiplicative hash otherwise.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Id to the position of its first listing.
pub enum IdIndex {
    Dense { min: i64, position: Vec<u32> },
    Sparse(HashMap<i64, u32, BuildHasherDefault<IdHasher>>),
}

const NONE: u32 = u32::MAX;

impl IdIndex {
    pub fn new(ids: &[i64]) -> Self {
        let (Some(&min), Some(&max)) = (ids.iter().min(), ids.iter().max()) else {
            return IdIndex::Sparse(HashMap::default());
        };
        let span = max.abs_diff(min);
        if span >= 4 * ids.len() as u64 + 1024 {
            let mut map = HashMap::with_capacity_and_hasher(ids.len(), BuildHasherDefault::default());
            for (i, &id) in ids.iter().enumerate() {
                map.entry(id).or_insert(i as u32);
            }
            return IdIndex::Sparse(map);
        }
        let mut position = vec![NONE; span as usize + 1];
        for (i, &id) in ids.iter().enumerate().rev() {
            position[id.abs_diff(min) as usize] = i as u32;
        }
        IdIndex::Dense { min, position }
    }

    pub fn get(&self, id: i64) -> Option<u32> {
        match self {
            IdIndex::Dense { min, position } => {
                let offset = usize::try_from(id.checked_sub(*min)?).ok()?;
                position.get(offset).copied().filter(|&p| p != NONE)
            }
            IdIndex::Sparse(map) => map.get(&id).copied(),
        }
    }

    pub fn contains(&self, id: i64) -> bool {
        self.get(id).is_some()
    }
}

/// A set of ids that says whether an id was seen before.
pub struct IdSet(HashMap<i64, (), BuildHasherDefault<IdHasher>>);

impl IdSet {
    pub fn with_capacity(n: usize) -> Self {
        Self(HashMap::with_capacity_and_hasher(
            n,
            BuildHasherDefault::default(),
        ))
    }

    /// True when `id` was not in the set.
    pub fn insert(&mut self, id: i64) -> bool {
        self.0.insert(id, ()).is_none()
    }
}

/// Fibonacci hashing of one integer: ids are not chosen by an adversary here, and SipHash cost
/// more than the lookups' other work.
#[derive(Default)]
pub struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_i64(&mut self, i: i64) {
        self.0 = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(29);
    }
}
