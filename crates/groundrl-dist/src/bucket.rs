//! How `all_reduce_sum` groups tensors: one collective per bucket instead of one per tensor, as
//! PyTorch DDP does (its `bucket_cap_mb`, 25 MiB by default): a call has a fixed cost (a round of
//! messages between ranks) that small tensors such as biases and norms would otherwise pay each.

use std::ops::Range;

use tch::{Device, Kind, Tensor};

/// What decides a tensor's bucket: one flat buffer holds one dtype on one device.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Slot {
    pub kind: Kind,
    pub device: Device,
    pub bytes: usize,
}

impl Slot {
    pub(crate) fn of(tensor: &Tensor) -> Self {
        Self {
            kind: tensor.kind(),
            device: tensor.device(),
            bytes: tensor.numel() * tensor.kind().elt_size_in_bytes(),
        }
    }
}

/// Splits the slots, in order, into buckets: runs of one dtype and device of at most `cap` bytes,
/// a slot larger than `cap` alone. Every rank passes the same tensors in the same order, so every
/// rank gets the same buckets and issues the same collectives.
pub(crate) fn plan(slots: &[Slot], cap: usize) -> Vec<Range<usize>> {
    let mut buckets = Vec::new();
    let mut start = 0;
    let mut bytes = 0;
    for (i, slot) in slots.iter().enumerate() {
        let first = &slots[start];
        let fits = slot.kind == first.kind && slot.device == first.device && bytes + slot.bytes <= cap;
        if i > start && !fits {
            buckets.push(start..i);
            start = i;
            bytes = 0;
        }
        bytes += slot.bytes;
    }
    if start < slots.len() {
        buckets.push(start..slots.len());
    }
    buckets
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(kind: Kind, bytes: usize) -> Slot {
        Slot {
            kind,
            device: Device::Cpu,
            bytes,
        }
    }

    #[test]
    fn fills_buckets_up_to_the_cap_in_order() {
        let slots = [40, 24, 1, 64, 8].map(|b| slot(Kind::Float, b));
        assert_eq!(plan(&slots, 64), vec![0..2, 2..3, 3..4, 4..5]);
        assert_eq!(plan(&slots, 1 << 20), vec![0..5]);
    }

    #[test]
    fn a_dtype_change_starts_a_bucket() {
        let slots = [
            slot(Kind::Float, 4),
            slot(Kind::Double, 8),
            slot(Kind::Double, 8),
            slot(Kind::Float, 4),
        ];
        assert_eq!(plan(&slots, 1024), vec![0..1, 1..3, 3..4]);
    }

    #[test]
    fn a_device_change_starts_a_bucket() {
        let mut slots = [slot(Kind::Float, 4), slot(Kind::Float, 4)];
        slots[1].device = Device::Cuda(0);
        assert_eq!(plan(&slots, 1024), vec![0..1, 1..2]);
    }

    #[test]
    fn a_slot_above_the_cap_is_alone() {
        let slots = [4, 100, 4].map(|b| slot(Kind::Float, b));
        assert_eq!(plan(&slots, 16), vec![0..1, 1..2, 2..3]);
    }

    #[test]
    fn no_slots_no_buckets() {
        assert!(plan(&[], 16).is_empty());
        assert_eq!(plan(&[slot(Kind::Float, 0)], 0), vec![0..1]);
    }
}
