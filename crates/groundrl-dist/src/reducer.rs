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
//! Buckets: runs of one dtype and device of at most `GroupOptions::bucket_bytes`, as in
//! `all_reduce_sum`, started strictly in order, each one all-reduce of a flat buffer. Once a bucket
//! has started, its parameters' gradients are views of its buffer (DDP's `gradient_as_bucket_view`):
//! the buffers cost no memory beyond the gradients, and the sum is made in place.
//!
//! When a bucket starts: once every one of its parameters has been reached as often as in the last
//! armed pass that reached it. The first armed pass after [`ProcessGroup::hook_gradients`] only
//! learns this (and the order, below), its buckets all starting after the backward pass; a parameter
//! that one backward pass of several autograd calls reaches in two of them is then waited for twice.
//!
//! Layout: at the first gradient sum, before any bucket starts, the buckets are laid out in the order
//! rank 0's armed pass first reached the parameters (DDP rebuilds its buckets the same way), that
//! order broadcast so that every rank lays out the same buckets; the parameters it did not reach
//! follow. If rank 0 reached none, the reverse of the parameters' order stays (backward's order when
//! they are listed in forward order). So a trainer whose parameters are sorted by name (layer 10
//! before layer 2) still gets buckets in the order the backward pass finishes them.
//!
//! The sum: a parameter has a gradient afterwards exactly when it had one on some rank (a rank
//! without one adds zeros), and one that no rank has keeps none. Each entry is one all-reduce of the
//! ranks' final gradients, as after the backward pass: with two ranks bitwise the same (an entry is
//! one addition, whose order does not matter); with more, the collective may add an entry's terms in
//! another order, since the entry sits elsewhere in the buckets. One case differs: a gradient that
//! arrives after its bucket started (an armed pass that reaches a parameter more often than the last
//! one did) is kept aside, summed over the ranks apart and added, so such a bucket's entries are
//! `Σ_r early_r + Σ_r late_r`, the same terms grouped otherwise ([`GradientSum::late`] counts these
//! buckets).

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
    /// Buckets that gradients reached after they had started: those gradients were summed apart
    /// and added.
    pub late: usize,
}

impl std::ops::AddAssign for GradientSum {
    fn add_assign(&mut self, other: Self) {
        self.buckets += other.buckets;
        self.overlapped += other.overlapped;
        self.late += other.late;
    }
}

/// The C++ reducer: the hooks on a group's parameters, with their bucket layout.
pub(crate) struct Reducer {
    raw: *mut c_void,
    params: Vec<Tensor>,
    layout: Layout,
    /// Whether a gradient sum has ended: the layout is fixed from then on.
    summed: bool,
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
    /// put on other tensors are removed first. A tensor that has gradient hooks already (a
    /// post-accumulate-grad hook or a tensor hook) is refused. From the first gradient sum on, the
    /// gradients are views of the buckets' buffers, and they stay so when the hooks are removed.
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
            summed: false,
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
        if !self.summed {
            self.learn_layout(group)?;
        }
        let raw = self.raw;
        let mut started = 0i64;
        group.call("gradient sum", |_, ms| {
            // SAFETY: a plain call on the live reducer, which writes `started`.
            unsafe { ffi::groundrl_dist_reducer_launch_rest(raw, ms, &mut started) }
        })?;
        let (anywhere, stale) = self.agree(group)?;
        group.call("gradient sum", |_, _| {
            // SAFETY: `anywhere` holds a flag a parameter and `stale` one a bucket, as the shim reads.
            unsafe { ffi::groundrl_dist_reducer_finish(raw, anywhere.as_ptr(), stale.as_ptr()) }
        })?;
        self.summed = true;
        Ok(GradientSum {
            buckets: self.layout.buckets.len(),
            overlapped: started as usize,
            late: stale.iter().filter(|&&n| n > 0).count(),
        })
    }

    /// One all-reduce of flags: how many ranks have each parameter's gradient, and on how many each
    /// bucket went stale.
    fn agree(&self, group: &mut ProcessGroup) -> Result<(Vec<i64>, Vec<i64>), DistError> {
        let n = self.params.len();
        let mut flags = vec![0i64; n + self.layout.buckets.len()];
        let raw = self.raw;
        group.call("gradient sum", |_, _| {
            // SAFETY: the shim writes one flag a parameter and one a bucket, the length of `flags`.
            unsafe { ffi::groundrl_dist_reducer_flags(raw, flags.as_mut_ptr()) }
        })?;
        let mut summed = [Tensor::from_slice(&flags).to_device(group.device)];
        group.all_reduce_sum(&mut summed)?;
        let mut anywhere = longs(&summed[0])?;
        let stale = anywhere.split_off(n);
        Ok((anywhere, stale))
    }

    /// Lays the buckets out in the order rank 0's armed pass first reached the parameters (the ones
    /// it did not reach after them, in the order they had), if it reached any. Before any bucket has
    /// started, so that no gradient is a view of a buffer of the old layout.
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
        let count = (reached[0].max(0) as usize).min(n);
        let first: Vec<usize> = reached[1..=count].iter().map(|&i| i as usize).collect();
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
