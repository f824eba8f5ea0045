//! Gradients summed over the ranks while the backward pass still runs (`csrc/reducer.cpp`), as
//! PyTorch DDP's reducer does: a hook on each parameter tells when autograd has reached it, and each
//! bucket's all-reduce starts as soon as its gradients are done, so that the communication of the
//! buckets backward finishes first hides behind the backward pass of the rest.
//!
//! Use: [`ProcessGroup::hook_gradients`] once; then, for each accumulation of gradients over
//! micro-batches, [`ProcessGroup::arm_gradient_hooks`] right before its last backward pass and
//! [`ProcessGroup::finish_gradient_sum`] after that pass. Earlier passes are not armed and only
//! accumulate (DDP's `no_sync`). Between arming and finishing the group refuses every other
//! collective: each rank's hooks start buckets at its own pace, so a collective in between would take
//! a different place in each rank's sequence of collectives.
//!
//! The sum is the one of [`ProcessGroup::all_reduce_sum`] on the gradients after the backward pass:
//! each bucket's collective adds the same values, copied from the gradients once they are final. A
//! parameter has a gradient afterwards exactly when it had one on some rank (a rank without one adds
//! zeros); one that no rank has keeps none. A gradient that grows after its bucket started (autograd
//! reached the parameter more often than in the last armed pass) has its bucket reduced again from the
//! final gradients ([`GradientSum::redone`]), so when a bucket started never changes the result.
//!
//! Buckets: runs of one dtype and device of at most `GroupOptions::bucket_bytes`, as in
//! `all_reduce_sum`, started strictly in order. The first layout takes the parameters in reverse
//! (backward reaches a model's last parameters first when they are listed in forward order). After
//! the first armed pass in which rank 0's backward reached any parameter, the layout is rebuilt once
//! in the order that pass reached them (DDP rebuilds its buckets the same way), rank 0's order
//! broadcast so that every rank lays out the same buckets: a trainer whose parameters are sorted by
//! name (layer 10 before layer 2) still gets buckets in the order the backward pass finishes them.

use std::ffi::c_void;
use std::ops::Range;

use tch::{Device, Tensor};

use crate::{DistError, ProcessGroup, bucket, ffi};

/// What one [`ProcessGroup::finish_gradient_sum`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GradientSum {
    /// Buckets of the layout.
    pub buckets: usize,
    /// Buckets whose all-reduce started during the backward pass; the rest started after it.
    pub overlapped: usize,
    /// Buckets reduced a second time because a gradient grew after its bucket had started.
    pub redone: usize,
}

/// The C++ reducer: the hooks on a group's parameters, with their bucket layout.
pub(crate) struct Reducer {
    raw: *mut c_void,
    params: Vec<Tensor>,
    layout: Layout,
    /// Whether the layout follows the order in which backward reaches the parameters.
    learned: bool,
    /// Between [`ProcessGroup::arm_gradient_hooks`] and [`ProcessGroup::finish_gradient_sum`].
    pub(crate) armed: bool,
}

impl Drop for Reducer {
    fn drop(&mut self) {
        // SAFETY: `raw` came from groundrl_dist_reducer_new and is freed once; freeing removes the hooks.
        unsafe { ffi::groundrl_dist_reducer_free(self.raw) }
    }
}

/// The parameters in bucket order, and each bucket's range of that order.
struct Layout {
    order: Vec<usize>,
    buckets: Vec<Range<usize>>,
}

impl Layout {
    fn of(params: &[Tensor], order: Vec<usize>, cap: usize) -> Self {
        let slots: Vec<bucket::Slot> = order.iter().map(|&i| bucket::Slot::of(&params[i])).collect();
        Self {
            buckets: bucket::plan(&slots, cap),
            order,
        }
    }

    /// The order and the buckets' ends as the shim takes them.
    fn raw(&self) -> (Vec<i64>, Vec<i64>) {
        (
            self.order.iter().map(|&i| i as i64).collect(),
            self.buckets.iter().map(|b| b.end as i64).collect(),
        )
    }

    fn members(&self, bucket: usize) -> &[usize] {
        &self.order[self.buckets[bucket].clone()]
    }
}

fn raw_tensors(params: &[Tensor]) -> Vec<ffi::RawTensor> {
    params.iter().map(|p| p.as_ptr() as ffi::RawTensor).collect()
}

fn out_of_step(message: impl Into<String>) -> DistError {
    DistError::GradientHooks(message.into())
}

impl ProcessGroup {
    /// Puts the gradient hooks on `params`: leaf tensors that require gradients, on
    /// [`Self::device`], each once; the same shapes, dtypes and order on every rank. Hooks this group
    /// put on other tensors are removed first. A tensor that already has a post-accumulate-grad hook
    /// is refused.
    pub fn hook_gradients(&mut self, params: &[Tensor]) -> Result<(), DistError> {
        if self.reducer.as_ref().is_some_and(|r| r.armed) {
            return Err(out_of_step(
                "the gradient hooks are armed: finish the gradient sum first",
            ));
        }
        for param in params {
            self.check_device("hook_gradients", param)?;
        }
        self.reducer = None;
        let layout = Layout::of(
            params,
            (0..params.len()).rev().collect(),
            self.options.bucket_bytes,
        );
        let (order, ends) = layout.raw();
        let raws = raw_tensors(params);
        // SAFETY: the tensors and arrays outlive the call; the shim keeps its own tensor handles.
        let raw = unsafe {
            ffi::groundrl_dist_reducer_new(
                self.raw,
                raws.as_ptr(),
                raws.len() as i64,
                order.as_ptr(),
                ends.as_ptr(),
                ends.len() as i64,
            )
        };
        if raw.is_null() {
            return Err(DistError::C10d {
                operation: "hook_gradients",
                message: ffi::last_error(),
            });
        }
        self.reducer = Some(Reducer {
            raw,
            params: params.iter().map(Tensor::shallow_clone).collect(),
            layout,
            learned: false,
            armed: false,
        });
        Ok(())
    }

    /// Whether the gradient hooks are on exactly `params` (the same tensors, in order).
    pub fn hooks_gradients_of(&self, params: &[Tensor]) -> bool {
        self.reducer.as_ref().is_some_and(|r| {
            let raws = raw_tensors(params);
            // SAFETY: the handles are live for the call, which only compares them.
            unsafe { ffi::groundrl_dist_reducer_holds(r.raw, raws.as_ptr(), raws.len() as i64) == 1 }
        })
    }

    /// Arms the gradient hooks for the next backward pass, the last of an accumulation: from now on
    /// a bucket's all-reduce starts as soon as its gradients are done. The next collective must be
    /// [`Self::finish_gradient_sum`]; others are refused until then.
    pub fn arm_gradient_hooks(&mut self) -> Result<(), DistError> {
        let reducer = self.reducer.as_ref().ok_or_else(no_hooks)?;
        if reducer.armed {
            return Err(out_of_step("the gradient hooks are armed already"));
        }
        let raw = reducer.raw;
        self.call("arm_gradient_hooks", |_, ms| {
            // SAFETY: a plain call on the live reducer.
            unsafe { ffi::groundrl_dist_reducer_arm(raw, ms) }
        })?;
        if let Some(reducer) = self.reducer.as_mut() {
            reducer.armed = true;
        }
        Ok(())
    }

    /// After the backward pass: sums the hooked parameters' gradients over the ranks, in place. The
    /// buckets the backward pass did not start are started now, in order; a parameter has a
    /// gradient afterwards exactly when some rank had one. Every rank calls it, armed or not (a rank
    /// without rows of its own adds what it has).
    pub fn finish_gradient_sum(&mut self) -> Result<GradientSum, DistError> {
        let mut reducer = self.reducer.take().ok_or_else(no_hooks)?;
        let result = reducer.finish(self);
        self.reducer = Some(reducer);
        result
    }
}

fn no_hooks() -> DistError {
    out_of_step("no gradient hooks: call hook_gradients first")
}

impl Reducer {
    fn finish(&mut self, group: &mut ProcessGroup) -> Result<GradientSum, DistError> {
        self.armed = false;
        let raw = self.raw;
        let mut started = 0i64;
        group.call("gradient sum", |_, ms| {
            // SAFETY: a plain call on the live reducer, which writes `started`.
            unsafe { ffi::groundrl_dist_reducer_launch_rest(raw, ms, &mut started) }
        })?;
        let (anywhere, redo) = self.agree(group)?;
        group.call("gradient sum", |_, _| {
            // SAFETY: `anywhere` holds a flag a parameter and `redo` one a bucket, as the shim reads.
            unsafe { ffi::groundrl_dist_reducer_finish(raw, anywhere.as_ptr(), redo.as_ptr()) }
        })?;
        let redone = self.redo(group, &anywhere, &redo)?;
        let buckets = self.layout.buckets.len();
        if !self.learned {
            self.learn_layout(group)?;
        }
        Ok(GradientSum {
            buckets,
            overlapped: started as usize,
            redone,
        })
    }

    /// One all-reduce of flags: how many ranks have each parameter's gradient, and in how many each
    /// bucket went stale.
    fn agree(&self, group: &mut ProcessGroup) -> Result<(Vec<i64>, Vec<i64>), DistError> {
        let mut flags: Vec<i64> = self
            .params
            .iter()
            .map(|p| i64::from(p.grad().defined()))
            .collect();
        let n = flags.len();
        flags.resize(n + self.layout.buckets.len(), 0);
        let raw = self.raw;
        group.call("gradient sum", |_, _| {
            // SAFETY: the shim writes one flag a bucket, for which `flags` has room after `n`.
            unsafe { ffi::groundrl_dist_reducer_stale(raw, flags[n..].as_mut_ptr()) }
        })?;
        let mut summed = [Tensor::from_slice(&flags).to_device(group.device)];
        group.all_reduce_sum(&mut summed)?;
        let mut anywhere = longs(&summed[0])?;
        let redo = anywhere.split_off(n);
        Ok((anywhere, redo))
    }

    /// Reduces the stale buckets again from the final gradients, on every rank (the flags are
    /// summed, so every rank redoes the same buckets); returns how many.
    fn redo(&self, group: &mut ProcessGroup, anywhere: &[i64], redo: &[i64]) -> Result<usize, DistError> {
        let stale: Vec<usize> = (0..redo.len()).filter(|&k| redo[k] > 0).collect();
        let mut grads: Vec<Tensor> = stale
            .iter()
            .flat_map(|&k| self.layout.members(k))
            .filter(|&&i| anywhere[i] > 0)
            .map(|&i| self.params[i].grad())
            .collect();
        group.all_reduce_sum(&mut grads)?;
        Ok(stale.len())
    }

    /// Lays the buckets out again in the order rank 0's last armed pass reached the parameters (the
    /// ones it did not reach after them, in the order they had), once that pass reached any.
    fn learn_layout(&mut self, group: &mut ProcessGroup) -> Result<(), DistError> {
        let n = self.params.len();
        let mut reached = vec![0i64; n + 1];
        let raw = self.raw;
        group.call("gradient sum", |_, _| {
            let (count, order) = reached.split_at_mut(1);
            // SAFETY: the shim writes at most one index a parameter, for which `order` has room.
            unsafe { ffi::groundrl_dist_reducer_ready_order(raw, order.as_mut_ptr(), &mut count[0]) }
        })?;
        let mut shared = Tensor::from_slice(&reached).to_device(group.device);
        group.broadcast(&mut shared, 0)?;
        let reached = longs(&shared)?;
        let count = reached[0] as usize;
        let first: Vec<usize> = reached[1..=count.min(n)].iter().map(|&i| i as usize).collect();
        if first.is_empty() {
            return Ok(());
        }
        let mut seen = vec![false; n];
        for &i in &first {
            *seen
                .get_mut(i)
                .ok_or_else(|| out_of_step("rank 0 hooked other parameters"))? = true;
        }
        let rest = self.layout.order.iter().copied().filter(|&i| !seen[i]);
        let order: Vec<usize> = first.iter().copied().chain(rest).collect();
        let layout = Layout::of(&self.params, order, group.options.bucket_bytes);
        let (order, ends) = layout.raw();
        group.call("gradient sum", |_, _| {
            // SAFETY: the arrays outlive the call.
            unsafe {
                ffi::groundrl_dist_reducer_set_layout(raw, order.as_ptr(), ends.as_ptr(), ends.len() as i64)
            }
        })?;
        self.layout = layout;
        self.learned = true;
        Ok(())
    }
}

/// A tensor of i64 as a vector, on the CPU.
fn longs(t: &Tensor) -> Result<Vec<i64>, DistError> {
    Vec::<i64>::try_from(t.to_device(Device::Cpu)).map_err(|e| DistError::C10d {
        operation: "gradient sum",
        message: e.to_string(),
    })
}
