//! Data-parallel training: one rank's view of the process group a run is split over, and the few
//! collectives the trainer needs, on `groundrl_dist`'s c10d group (Gloo on CPU tensors today; the
//! backend stays behind [`ProcessGroup`], so a CUDA one changes nothing here).
//!
//! Each rank rolls out its own share of a step's prompts, whole groups only, and trains on its own
//! rows; the ranks stay identical because every optimizer step applies the same summed gradient to
//! the same weights. The loss of a mini-batch is divided by the *global* mini-batch's totals
//! ([`crate::loss::LossScale`] summed over the ranks), so each rank's loss is its exact share of the
//! one-process loss and the sum of the ranks' gradients is the one-process gradient: the all-reduce
//! sums, it does not average (docs/distributed.md derives it).

use std::ops::Range;
use std::time::Duration;

use groundrl_dist::{Backend, DistError, GradientSum, GroupOptions, ProcessGroup, Rendezvous};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tch::{Device, Kind, Tensor};

use crate::config::DistributedConfig;
use crate::optim::Partition;

/// One rank of a data-parallel run.
pub struct DataParallel {
    group: ProcessGroup,
    /// Where the small tensors of counts and checksums are made: the model's device, which is the
    /// one the group's backend reduces on.
    device: Device,
    checksum_every: u32,
    /// `distributed.overlap_backward`: gradients summed during the last backward pass of a mini-batch.
    overlap_backward: bool,
    /// What the overlapped gradient sums did, added up.
    overlapped: GradientSum,
}

/// Why a collective of the run failed or the ranks disagree.
#[derive(Debug, thiserror::Error)]
pub enum DataParallelError {
    #[error("rank {rank} of {world_size}: {source}")]
    Collective {
        rank: usize,
        world_size: usize,
        source: DistError,
    },
    #[error("rank {rank} of {world_size}: {what} from rank {from} could not be read: {why}")]
    Gathered {
        rank: usize,
        world_size: usize,
        what: &'static str,
        from: usize,
        why: String,
    },
    #[error(
        "the ranks' weights differ after step {step}: checksum {reference:#018x} on rank 0, \
         differing on rank(s) {ranks:?} ({checksums}); the replicas went out of step"
    )]
    Diverged {
        step: u64,
        reference: u64,
        ranks: Vec<usize>,
        checksums: String,
    },
}

impl DataParallel {
    /// Joins the group of torchrun's variables when they describe more than one process
    /// (`WORLD_SIZE` > 1); `None` for a run of one process (no variables, or a world of one).
    pub fn from_env(cfg: &DistributedConfig, device: Device) -> Result<Option<Self>, DistError> {
        let world = std::env::var("WORLD_SIZE").ok();
        if world.as_deref().is_none_or(|w| w.trim() == "1") {
            return Ok(None);
        }
        let rendezvous = Rendezvous::from_env()?;
        // NCCL reduces CUDA tensors, Gloo CPU ones: the group's backend follows the model's device.
        let backend = if device.is_cuda() {
            Backend::Nccl
        } else {
            Backend::Gloo
        };
        let options = GroupOptions {
            timeout: Duration::from_secs(cfg.timeout_s),
            backend,
            ..GroupOptions::default()
        };
        let group = ProcessGroup::new(&rendezvous, options)?;
        Ok(Some(Self::new(group, device, cfg)))
    }

    /// A rank over `group`, with `cfg`'s replica check and gradient overlap (its timeout is the
    /// group's).
    pub fn new(group: ProcessGroup, device: Device, cfg: &DistributedConfig) -> Self {
        Self {
            group,
            device,
            checksum_every: cfg.checksum_every,
            overlap_backward: cfg.overlap_backward,
            overlapped: GradientSum::default(),
        }
    }

    pub fn rank(&self) -> usize {
        self.group.rank()
    }

    /// The buckets of all overlapped gradient sums so far: how many, how many started during a
    /// backward pass, and how many gradients reached after they had started.
    pub fn overlapped(&self) -> GradientSum {
        self.overlapped
    }

    /// Turns `distributed.overlap_backward` on or off for the following updates (every rank alike).
    pub fn set_overlap_backward(&mut self, on: bool) {
        self.overlap_backward = on;
    }

    pub fn world_size(&self) -> usize {
        self.group.world_size()
    }

    /// This rank's contiguous share of `n` items (rank r of W takes `[r n / W, (r + 1) n / W)`).
    pub fn share(&self, n: usize) -> Range<usize> {
        share(n, self.rank(), self.world_size())
    }

    fn failed(&self, source: DistError) -> DataParallelError {
        DataParallelError::Collective {
            rank: self.rank(),
            world_size: self.world_size(),
            source,
        }
    }

    /// Each value summed over the ranks.
    pub fn sum_i64(&mut self, values: &[i64]) -> Result<Vec<i64>, DataParallelError> {
        let mut t = [Tensor::from_slice(values).to_device(self.device)];
        self.group.all_reduce_sum(&mut t).map_err(|e| self.failed(e))?;
        Ok(Vec::<i64>::try_from(t[0].to_device(Device::Cpu)).unwrap_or_default())
    }

    /// Each value summed over the ranks (f64, so that sums of f64 metrics lose nothing).
    pub fn sum_f64(&mut self, values: &[f64]) -> Result<Vec<f64>, DataParallelError> {
        let mut t = [Tensor::from_slice(values).to_device(self.device)];
        self.group.all_reduce_sum(&mut t).map_err(|e| self.failed(e))?;
        Ok(Vec::<f64>::try_from(t[0].to_device(Device::Cpu)).unwrap_or_default())
    }

    /// Every rank's `value`, in rank order (as JSON over the group).
    pub fn gather<T: Serialize + DeserializeOwned>(
        &mut self,
        what: &'static str,
        value: &T,
    ) -> Result<Vec<T>, DataParallelError> {
        let bytes = serde_json::to_vec(value).map_err(|e| self.unreadable(what, self.rank(), e))?;
        let all = self.group.all_gather_bytes(&bytes).map_err(|e| self.failed(e))?;
        all.iter()
            .enumerate()
            .map(|(from, b)| serde_json::from_slice(b).map_err(|e| self.unreadable(what, from, e)))
            .collect()
    }

    fn unreadable(&self, what: &'static str, from: usize, why: impl ToString) -> DataParallelError {
        DataParallelError::Gathered {
            rank: self.rank(),
            world_size: self.world_size(),
            what,
            from,
            why: why.to_string(),
        }
    }

    /// Returns once every rank has called it.
    pub fn barrier(&mut self) -> Result<(), DataParallelError> {
        self.group.barrier().map_err(|e| self.failed(e))
    }

    /// Call right before the last backward pass of a mini-batch (after the earlier ones, which
    /// only accumulate). With `distributed.overlap_backward` it arms the gradient hooks (put on
    /// `params` on first use) so that the pass starts each bucket's all-reduce as soon as its
    /// gradients are done; [`Self::sum_gradients`] must then follow the pass, before any other
    /// collective.
    pub fn before_last_backward(&mut self, params: &[Tensor]) -> Result<(), DataParallelError> {
        if !self.overlap_backward {
            return Ok(());
        }
        self.hook(params)?;
        self.group.arm_gradient_hooks().map_err(|e| self.failed(e))
    }

    /// Puts the gradient hooks on `params` unless they are there already.
    fn hook(&mut self, params: &[Tensor]) -> Result<(), DataParallelError> {
        if self.group.hooks_gradients_of(params) {
            return Ok(());
        }
        self.group.hook_gradients(params).map_err(|e| self.failed(e))
    }

    /// Sums the parameters' gradients over the ranks, in place, in the group's buckets: those the
    /// last backward pass started ([`Self::before_last_backward`]) and the rest.
    ///
    /// A parameter has a gradient on every rank after this exactly when it had one on some rank:
    /// one that no rank's backward pass reached stays without (as in one process, where AdamW then
    /// leaves it alone), and one that only some ranks reached gets zeros on the others before the
    /// sum, so that every rank updates the same parameters.
    pub fn sum_gradients(&mut self, params: &[Tensor]) -> Result<(), DataParallelError> {
        if self.overlap_backward {
            self.hook(params)?;
            self.overlapped += self.group.finish_gradient_sum().map_err(|e| self.failed(e))?;
            return Ok(());
        }
        self.sum_gradients_after_backward(params)
    }

    /// [`Self::sum_gradients`] with every bucket started after the backward pass.
    fn sum_gradients_after_backward(&mut self, params: &[Tensor]) -> Result<(), DataParallelError> {
        let local: Vec<i64> = params.iter().map(|p| i64::from(p.grad().defined())).collect();
        let anywhere = self.sum_i64(&local)?;
        let missing: Vec<&Tensor> = params
            .iter()
            .zip(local.iter().zip(&anywhere))
            .filter(|&(_, (&here, &all))| here == 0 && all > 0)
            .map(|(p, _)| p)
            .collect();
        if !missing.is_empty() {
            // A backward pass of zero times each parameter's sum gives them zero gradients.
            let zero: Tensor = missing
                .iter()
                .map(|p| p.sum(Kind::Float) * 0.0)
                .reduce(|a, b| a + b)
                .unwrap_or_else(|| Tensor::from(0f32));
            zero.backward();
        }
        let mut grads: Vec<Tensor> = params
            .iter()
            .zip(&anywhere)
            .filter(|&(_, &all)| all > 0)
            .map(|(p, _)| p.grad())
            .collect();
        self.group.all_reduce_sum(&mut grads).map_err(|e| self.failed(e))
    }

    /// After an applied optimizer step under ZeRO stage 1: each parameter that has a gradient (so
    /// its owner updated it) is replaced on every rank by its owner's values, in bucketed broadcasts,
    /// one run of buckets per owning rank. `params` are in the partition's order.
    pub fn share_updates(
        &mut self,
        params: &[Tensor],
        partition: &Partition,
    ) -> Result<(), DataParallelError> {
        for root in 0..self.world_size() {
            let mut updated: Vec<Tensor> = params
                .iter()
                .enumerate()
                .filter(|&(i, p)| partition.owner(i) == root && p.grad().defined())
                .map(|(_, p)| p.shallow_clone())
                .collect();
            self.group
                .broadcast_bucketed(&mut updated, root)
                .map_err(|e| self.failed(e))?;
        }
        Ok(())
    }

    /// Brings the entries of `count` items, item `i`'s from its owner `owner(i)`, to rank 0, one
    /// tensor at a time so that a rank holds at most one received tensor on the device: every rank
    /// calls this with `entries(i)` its own tensors (the owner's) or blanks of their shapes and
    /// dtypes (the others'). Rank 0 gets every entry, on the CPU, in item order; the other ranks an
    /// empty list. An entry off the group's device (a step count on the CPU) travels through a copy.
    pub fn gather_to_first(
        &mut self,
        count: usize,
        owner: impl Fn(usize) -> usize,
        entries: impl Fn(usize) -> Vec<(String, Tensor)>,
    ) -> Result<Vec<(String, Tensor)>, DataParallelError> {
        let mut out = Vec::new();
        let first = self.rank() == 0;
        for i in 0..count {
            let root = owner(i);
            if root == 0 && !first {
                continue;
            }
            for (name, tensor) in entries(i) {
                let mut tensor = tensor.to_device(self.device);
                if root != 0 {
                    self.group
                        .broadcast(&mut tensor, root)
                        .map_err(|e| self.failed(e))?;
                }
                if first {
                    out.push((name, tensor.to_device(Device::Cpu)));
                }
            }
        }
        Ok(out)
    }

    /// Whether the weights are to be compared after step `step`.
    pub fn checks_at(&self, step: u64) -> bool {
        self.checksum_every > 0 && step.is_multiple_of(u64::from(self.checksum_every))
    }

    /// Compares a checksum of `params` over the ranks; an error names the ranks whose differ from
    /// rank 0's.
    pub fn check_replicas(&mut self, params: &[Tensor], step: u64) -> Result<(), DataParallelError> {
        let mine = checksum(params);
        let all = self.gather("weight checksum", &mine)?;
        let reference = all[0];
        let ranks: Vec<usize> = (0..all.len()).filter(|&r| all[r] != reference).collect();
        if ranks.is_empty() {
            return Ok(());
        }
        let checksums = ranks
            .iter()
            .map(|&r| format!("rank {r}: {:#018x}", all[r]))
            .collect::<Vec<_>>()
            .join(", ");
        Err(DataParallelError::Diverged {
            step,
            reference,
            ranks,
            checksums,
        })
    }
}

/// `counts` summed over the ranks of `dp`, so that every rank decides alike on the run's totals;
/// without ranks (`None`), `counts` as they are.
pub fn counts_over_ranks<const N: usize>(
    dp: Option<&mut DataParallel>,
    counts: [u64; N],
) -> Result<[u64; N], DataParallelError> {
    let Some(dp) = dp else {
        return Ok(counts);
    };
    let local: Vec<i64> = counts.iter().map(|&c| c as i64).collect();
    let all = dp.sum_i64(&local)?;
    Ok(std::array::from_fn(|i| all.get(i).map_or(0, |&c| c as u64)))
}

/// Rank `rank`'s contiguous share of `n` items over `world` ranks.
pub fn share(n: usize, rank: usize, world: usize) -> Range<usize> {
    let world = world.max(1);
    n * rank / world..n * (rank + 1) / world
}

/// Rank `rank`'s contiguous share of `n` items cut into batches of `batch` (the last one shorter):
/// the items of its [`share`] of the batches, so that it starts on a batch boundary and its own
/// batches of `batch` are the ones one process cuts. The shares cover `0..n` in rank order.
pub fn batch_share(n: usize, batch: usize, rank: usize, world: usize) -> Range<usize> {
    let batch = batch.max(1);
    let batches = share(n.div_ceil(batch), rank, world);
    (batches.start * batch).min(n)..(batches.end * batch).min(n)
}

/// A checksum of tensors' bits: each tensor's elements read as integers of their width and summed
/// (on the tensor's device, so nothing of the size of the weights moves), combined in order with odd
/// multipliers. Any single changed bit changes it; it is a replica check, not a cryptographic hash.
pub fn checksum(params: &[Tensor]) -> u64 {
    tch::no_grad(|| {
        params.iter().enumerate().fold(0u64, |acc, (i, p)| {
            let bits = match p.kind().elt_size_in_bytes() {
                8 => Kind::Int64,
                4 => Kind::Int,
                2 => Kind::Int16,
                _ => Kind::Int8,
            };
            let sum = p
                .detach()
                .contiguous()
                .view_dtype(bits)
                .sum(Kind::Int64)
                .int64_value(&[]) as u64;
            acc.wrapping_mul(0x100_0000_01b3)
                .wrapping_add(sum.wrapping_mul(2 * i as u64 + 1))
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_cover_the_items_in_order_without_overlap() {
        assert_eq!(share(8, 0, 2), 0..4);
        assert_eq!(share(8, 1, 2), 4..8);
        assert_eq!(share(6, 2, 3), 4..6);
        assert_eq!(share(5, 0, 1), 0..5);
    }

    /// 10 items over 3 ranks: whole batches each, in order, and together every item once.
    #[test]
    fn batch_shares_are_whole_batches_in_order() {
        let shares =
            |batch| -> Vec<Range<usize>> { (0..3).map(|rank| batch_share(10, batch, rank, 3)).collect() };
        assert_eq!(shares(1), [0..3, 3..6, 6..10]);
        assert_eq!(shares(2), [0..2, 2..6, 6..10]);
        assert_eq!(shares(3), [0..3, 3..6, 6..10]);
        assert_eq!(shares(4), [0..4, 4..8, 8..10]);
        assert_eq!(shares(16), [0..0, 0..0, 0..10]);
        for batch in 1..=12 {
            let all: Vec<usize> = shares(batch).into_iter().flatten().collect();
            assert_eq!(all, (0..10).collect::<Vec<_>>(), "batch {batch}");
            assert!(shares(batch).iter().all(|s| s.start % batch == 0 || s.is_empty()));
        }
        assert_eq!(batch_share(10, 4, 0, 1), 0..10);
    }

    #[test]
    fn the_checksum_sees_one_changed_bit_and_the_order() {
        let a = Tensor::from_slice(&[1.0f32, 2.0, 3.0]);
        let b = Tensor::from_slice(&[0.5f32]).to_kind(Kind::BFloat16);
        let base = checksum(&[a.shallow_clone(), b.shallow_clone()]);
        assert_eq!(base, checksum(&[a.copy(), b.copy()]));
        let nudged = Tensor::from_slice(&[1.0f32, f32::from_bits(2.0f32.to_bits() ^ 1), 3.0]);
        assert_ne!(base, checksum(&[nudged, b.shallow_clone()]));
        assert_ne!(base, checksum(&[b, a]));
    }
}
