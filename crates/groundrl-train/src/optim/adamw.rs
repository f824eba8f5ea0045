//! AdamW written out in tensor operations, because tch's built-in optimizer can neither keep f32 master
//! weights nor export its state for a checkpoint. The arithmetic is torch.optim.AdamW's: decoupled
//! weight decay, then the bias-corrected Adam update. For a parameter `p` with (clipped) gradient `g` at
//! its `t`-th update:
//!
//! ```text
//! p ← p × (1 − lr × weight_decay)
//! m ← β1 m + (1 − β1) g
//! v ← β2 v + (1 − β2) g²
//! p ← p − lr / (1 − β1^t) × m / (√v / √(1 − β2^t) + eps)
//! ```
//!
//! The moments `m`, `v` are f32 whatever the parameter's dtype. With a master copy, `p` above is that
//! f32 copy and the bf16 parameter receives its rounded value; without one, a bf16 parameter is widened
//! to f32, updated and rounded back, so an update smaller than half a bf16 spacing is lost.
//!
//! On CUDA (builds with the `cuda` feature) each parameter's update is one kernel
//! ([`fused::adamw`]), which reads and writes each tensor once where the composition below makes about
//! a dozen passes over f32 tensors of the parameter's size (about 500 GB of memory traffic per step
//! for a 3B model); it computes the composition's operations in their order and rounding (a CUDA
//! test compares the two). Elsewhere the composition runs.

use std::collections::HashSet;

use groundrl_tensor::foreach;
use groundrl_tensor::fused::{self, AdamwScalars};
use tch::{Kind, TchError, Tensor};

use super::{OptimConfig, OptimError, Shard};
use crate::checkpoint::{CheckpointError, restore_tensors};

/// Added to the norm before dividing when clipping, as torch's `clip_grad_norm_` does.
const CLIP_EPS: f64 = 1e-6;

/// What one [`AdamW::step`] did.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum StepOutcome {
    /// The parameters moved. `grad_norm` is the global L2 norm before clipping; `clipped` says whether
    /// the gradients were scaled down to `grad_clip`.
    Applied { grad_norm: f64, clipped: bool },
    /// Some gradient held NaN or ±inf (so the norm is not finite): parameters, moments and step counts
    /// are left as they were.
    Skipped { grad_norm: f64 },
}

/// AdamW over a fixed set of named parameters. See the module doc for the update.
pub struct AdamW {
    cfg: OptimConfig,
    params: Vec<ParamState>,
    /// This rank's share of the state under ZeRO stage 1 (`None`: all of it).
    shard: Option<Shard>,
}

/// One trained tensor and what AdamW keeps for it.
struct ParamState {
    name: String,
    param: Tensor,
    /// The state of its updates; `None` when another rank keeps it (ZeRO stage 1).
    moments: Option<Moments>,
    /// Whether it has had a gradient: such a parameter keeps being updated (with a zero gradient
    /// when its gradient was released and the next accumulation gave it none), as when its
    /// gradient tensor stays, zeroed.
    had_grad: bool,
}

/// What AdamW keeps for one parameter it updates.
struct Moments {
    /// The f32 copy that takes the updates of a bf16/f16 parameter when `fp32_master` is on.
    master: Option<Tensor>,
    exp_avg: Tensor,
    exp_avg_sq: Tensor,
    /// Updates applied to this parameter. Each parameter counts its own (as in torch), so the bias
    /// correction stays right for a parameter whose first gradient comes late.
    steps: u64,
}

impl AdamW {
    /// An optimizer for `params`, e.g. the model's variables that require gradients. Parameters must
    /// be f32, bf16 or f16 and uniquely named; moments (and masters) live on each parameter's device.
    /// Pass them in a fixed order (e.g. sorted by name, not a `HashMap`'s order): the global gradient
    /// norm is summed in that order, and its last bits decide the clipping scale.
    ///
    /// Master copies are taken from the parameters here, so build the optimizer after the model's
    /// weights are loaded, or restore its state with [`AdamW::load_state`] after restoring them:
    /// otherwise the first step would write stale masters back into the parameters.
    pub fn new(params: Vec<(String, Tensor)>, cfg: &OptimConfig) -> Result<Self, OptimError> {
        Self::build(params, cfg, None)
    }

    /// [`AdamW::new`] keeping state for `shard`'s parameters only (ZeRO stage 1): [`AdamW::step`]
    /// updates those alone, and the caller broadcasts each parameter from its owner afterwards.
    /// The partition must cover `params`, in their order.
    pub fn sharded(
        params: Vec<(String, Tensor)>,
        cfg: &OptimConfig,
        shard: Shard,
    ) -> Result<Self, OptimError> {
        if shard.partition.len() != params.len() {
            return Err(OptimError::Partition {
                tensors: shard.partition.len(),
                params: params.len(),
            });
        }
        Self::build(params, cfg, Some(shard))
    }

    fn build(
        params: Vec<(String, Tensor)>,
        cfg: &OptimConfig,
        shard: Option<Shard>,
    ) -> Result<Self, OptimError> {
        cfg.validate()?;
        let mut seen = HashSet::new();
        let params = params
            .into_iter()
            .enumerate()
            .map(|(i, (name, param))| {
                if !seen.insert(name.clone()) {
                    return Err(OptimError::Duplicate(name));
                }
                let owned = shard.as_ref().is_none_or(|s| s.owns(i));
                ParamState::new(name, param, cfg.fp32_master, owned)
            })
            .collect::<Result<_, _>>()?;
        Ok(Self {
            cfg: cfg.clone(),
            params,
            shard,
        })
    }

    /// One update with learning rate `lr` from the gradients in the parameters' `.grad`.
    ///
    /// The global gradient norm comes first, over every parameter with a gradient (those of other
    /// ranks' shards too): when it is not finite the step is skipped whole. Otherwise gradients above
    /// `grad_clip` are scaled by `grad_clip / (norm + 1e-6)` (in the update only; the `.grad` tensors
    /// are not modified) and every parameter that has a gradient and whose state this optimizer
    /// keeps is updated. Parameters without one (frozen, or not reached by the backward pass) are
    /// left alone.
    pub fn step(&mut self, lr: f64) -> Result<StepOutcome, OptimError> {
        if !(lr >= 0.0 && lr.is_finite()) {
            return Err(OptimError::LearningRate(lr));
        }
        tch::no_grad(|| {
            let mut with_grad = Vec::with_capacity(self.params.len());
            for p in &mut self.params {
                if let Some(grad) = p.gradient()? {
                    with_grad.push((p, grad));
                }
            }
            let grad_norm = global_norm(with_grad.iter().map(|(_, grad)| grad))?;
            if !grad_norm.is_finite() {
                return Ok(StepOutcome::Skipped { grad_norm });
            }
            let clipped = self.cfg.grad_clip > 0.0 && grad_norm > self.cfg.grad_clip;
            let scale = if clipped {
                self.cfg.grad_clip / (grad_norm + CLIP_EPS)
            } else {
                1.0
            };
            for (p, grad) in with_grad {
                if let Some(moments) = &mut p.moments {
                    moments.update(&p.param, &grad, scale, lr, &self.cfg)?;
                }
            }
            Ok(StepOutcome::Applied { grad_norm, clipped })
        })
    }

    /// The name of the first parameter, in its order, that holds NaN or infinity; `None` when all
    /// are finite. One flag per parameter, gathered in one transfer. Called after each applied step
    /// (when every rank holds every parameter's new value), so that a run stops at the step where
    /// its weights went bad rather than at its next save: a NaN or infinity in the moments or master
    /// copies reaches the weights in the same update.
    pub fn first_non_finite(&self) -> Result<Option<&str>, TchError> {
        let floating: Vec<&ParamState> = self
            .params
            .iter()
            .filter(|p| p.param.is_floating_point())
            .collect();
        let Some(device) = floating.first().map(|p| p.param.device()) else {
            return Ok(None);
        };
        // A norm is finite when every value is and no sum of squares overflows: one read decides the
        // common case, and only a non-finite norm takes the per-parameter check that names it.
        let params: Vec<Tensor> = floating.iter().map(|p| p.param.shallow_clone()).collect();
        if let Some(norms) = foreach::norms(&params, 2.0)?
            && norms.f_isfinite()?.f_all()?.f_int64_value(&[])? != 0
        {
            return Ok(None);
        }
        let flags = floating
            .iter()
            .map(|p| p.param.f_isfinite()?.f_all()?.f_to_device(device))
            .collect::<Result<Vec<_>, _>>()?;
        let flags = Tensor::f_stack(&flags, 0)?.f_to_device(tch::Device::Cpu)?;
        let finite = Vec::<bool>::try_from(&flags)?;
        Ok(finite.iter().position(|f| !f).map(|i| floating[i].name.as_str()))
    }

    /// The parameters it updates, in its order (sharing their storage).
    pub fn parameters(&self) -> Vec<Tensor> {
        self.params.iter().map(|p| p.param.shallow_clone()).collect()
    }

    /// This rank's share of the state under ZeRO stage 1; `None` when it keeps all of it.
    pub fn shard(&self) -> Option<&Shard> {
        self.shard.as_ref()
    }

    /// Elements of the state this optimizer keeps (moments and masters), and of the parameters
    /// it keeps them for.
    pub fn kept_elements(&self) -> (i64, i64) {
        self.params
            .iter()
            .filter_map(|p| p.moments.as_ref().map(|m| (p.param.numel() as i64, m)))
            .fold((0, 0), |(state, params), (n, m)| {
                let tensors = 2 + i64::from(m.master.is_some());
                (state + tensors * n, params + n)
            })
    }

    /// Zeroes every parameter's gradient before the next backward pass. As with tch's own optimizers
    /// the gradient tensor stays (zeroed), so a parameter that had one keeps being updated. In place
    /// only, without tch's `zero_grad`'s in-place detach, which a view refuses: with
    /// `distributed.overlap_backward` a gradient is a view of its bucket's buffer. Gradients here never
    /// carry a graph of their own, so there is nothing to detach.
    pub fn zero_grad(&mut self) -> Result<(), TchError> {
        let mut grads: Vec<Tensor> = (self.params.iter())
            .map(|p| p.param.grad())
            .filter(Tensor::defined)
            .collect();
        if !foreach::zero(&grads)? {
            for grad in &mut grads {
                let _ = grad.f_zero_()?;
            }
        }
        Ok(())
    }

    /// Drops every parameter's gradient before the next accumulation, where a CUDA build can
    /// (`foreach::release_grads`), else zeroes them ([`AdamW::zero_grad`]). The first backward
    /// then hands each parameter its gradient instead of adding it to zeros: one add per parameter
    /// and the zeroing fewer each step. A parameter that had a gradient and gets none in the next
    /// accumulation is stepped with a zero one, as after `zero_grad`, so both give the same
    /// update. Not for gradients that other code holds (data-parallel buckets): those are zeroed.
    pub fn release_grads(&mut self) -> Result<(), TchError> {
        let params: Vec<Tensor> = (self.params.iter_mut())
            .filter(|p| p.param.grad().defined())
            .map(|p| {
                p.had_grad = true;
                p.param.shallow_clone()
            })
            .collect();
        if !foreach::release_grads(&params)? {
            self.zero_grad()?;
        }
        Ok(())
    }

    /// The state to checkpoint, per parameter `NAME`: `exp_avg/NAME`, `exp_avg_sq/NAME` (f32),
    /// `master/NAME` (f32, when kept) and `step/NAME` (an i64 scalar); of the parameters this rank
    /// keeps state for when sharded (gather the rest with [`AdamW::entries`]).
    ///
    /// The moment and master tensors are the live ones, not copies (a 3B model's state is tens of GB):
    /// write them out before the next step.
    pub fn state(&self) -> Vec<(String, Tensor)> {
        (0..self.params.len())
            .filter(|&i| self.params[i].moments.is_some())
            .flat_map(|i| self.entries(i))
            .collect()
    }

    /// Parameter `i`'s entries of [`AdamW::state`]: the live tensors when this optimizer keeps its
    /// state, else uninitialised tensors of the owner's names, shapes and dtypes, on the parameter's
    /// device, to receive them into.
    pub fn entries(&self, i: usize) -> Vec<(String, Tensor)> {
        let p = &self.params[i];
        match &p.moments {
            Some(m) => p.named(
                m.exp_avg.shallow_clone(),
                m.exp_avg_sq.shallow_clone(),
                m.master.as_ref().map(Tensor::shallow_clone),
                Tensor::from(m.steps as i64),
            ),
            None => {
                let blank = || Tensor::empty(p.param.size(), (Kind::Float, p.param.device()));
                let master = keeps_master(self.cfg.fp32_master, p.param.kind()).then(blank);
                p.named(blank(), blank(), master, Tensor::from(0i64))
            }
        }
    }

    /// Which of a state's entries (by name, e.g. a checkpoint file's) this optimizer keeps: all of
    /// an unsharded one's, a sharded one's own parameters'. An entry naming no parameter of the
    /// optimizer is refused, naming it.
    pub fn entries_kept<'a>(
        &self,
        names: impl IntoIterator<Item = &'a str>,
    ) -> Result<HashSet<&'a str>, OptimError> {
        let kept: HashSet<&str> = self
            .params
            .iter()
            .filter(|p| p.moments.is_some())
            .map(|p| p.name.as_str())
            .collect();
        let known: HashSet<&str> = self.params.iter().map(|p| p.name.as_str()).collect();
        let mut mine = HashSet::new();
        for name in names {
            let param = name.split_once('/').map_or("", |(_, param)| param);
            if kept.contains(param) {
                mine.insert(name);
            } else if !known.contains(param) {
                return Err(CheckpointError::UnexpectedTensor {
                    name: name.to_owned(),
                }
                .into());
            }
        }
        Ok(mine)
    }

    /// Restores a state written by [`AdamW::state`] of an unsharded optimizer over the same
    /// parameters and config (or gathered whole from a sharded one): a sharded optimizer takes its
    /// own parameters' entries from it ([`AdamW::entries_kept`]) and leaves the rest to their owners,
    /// so `state` may hold only those.
    ///
    /// Every expected tensor must be present with its shape and dtype and nothing else may be: the error
    /// names the offending tensor. Continuing after a load gives the same bits as never having stopped
    /// (the parameters themselves are restored from the model weights).
    pub fn load_state(&mut self, state: &[(String, Tensor)]) -> Result<(), OptimError> {
        let kept = self.entries_kept(state.iter().map(|(name, _)| name.as_str()))?;
        let mine: Vec<(String, Tensor)> = state
            .iter()
            .filter(|(name, _)| kept.contains(name.as_str()))
            .map(|(name, tensor)| (name.clone(), tensor.shallow_clone()))
            .collect();
        let targets = self.state();
        restore_tensors(&targets, &mine)?;
        let steps = targets.iter().filter(|(name, _)| name.starts_with("step/"));
        for (moments, (name, step)) in self
            .params
            .iter_mut()
            .filter_map(|p| p.moments.as_mut())
            .zip(steps)
        {
            let value = step.f_int64_value(&[])?;
            moments.steps = u64::try_from(value).map_err(|_| OptimError::NegativeStep {
                name: name.clone(),
                value,
            })?;
        }
        Ok(())
    }
}

/// Whether a parameter of `kind` gets an f32 master copy.
fn keeps_master(fp32_master: bool, kind: Kind) -> bool {
    fp32_master && kind != Kind::Float
}

impl ParamState {
    /// The parameter with fresh state when `owned`, else with none.
    fn new(name: String, param: Tensor, fp32_master: bool, owned: bool) -> Result<Self, OptimError> {
        let kind = param.kind();
        if !matches!(kind, Kind::Float | Kind::BFloat16 | Kind::Half) {
            return Err(OptimError::Kind { name, kind });
        }
        let moments = owned.then(|| Moments::new(&param, fp32_master)).transpose()?;
        Ok(Self {
            name,
            param,
            moments,
            had_grad: false,
        })
    }

    /// Its gradient for a step: the one it holds, a zero one when it has had one before (its
    /// gradient released and not given again), else none (never reached by a backward).
    fn gradient(&mut self) -> Result<Option<Tensor>, TchError> {
        let grad = self.param.grad();
        if grad.defined() {
            self.had_grad = true;
            return Ok(Some(grad));
        }
        match self.had_grad {
            true => self.param.f_zeros_like().map(Some),
            false => Ok(None),
        }
    }

    /// Its state entries under their checkpoint names, in [`AdamW::state`]'s order.
    fn named(
        &self,
        exp_avg: Tensor,
        exp_avg_sq: Tensor,
        master: Option<Tensor>,
        step: Tensor,
    ) -> Vec<(String, Tensor)> {
        let name = &self.name;
        let mut out = vec![
            (format!("exp_avg/{name}"), exp_avg),
            (format!("exp_avg_sq/{name}"), exp_avg_sq),
        ];
        out.extend(master.map(|m| (format!("master/{name}"), m)));
        out.push((format!("step/{name}"), step));
        out
    }
}

impl Moments {
    fn new(param: &Tensor, fp32_master: bool) -> Result<Self, TchError> {
        let master = if keeps_master(fp32_master, param.kind()) {
            Some(param.f_detach()?.f_to_kind(Kind::Float)?)
        } else {
            None
        };
        let moment = || Tensor::f_zeros(param.size(), (Kind::Float, param.device()));
        Ok(Self {
            exp_avg: moment()?,
            exp_avg_sq: moment()?,
            master,
            steps: 0,
        })
    }

    /// Applies the update of the module doc to `param` with the gradient multiplied by `scale` (the
    /// clipping): one kernel where [`fused::adamw`] applies, else the composition of libtorch
    /// operations.
    fn update(
        &mut self,
        param: &Tensor,
        grad: &Tensor,
        scale: f64,
        lr: f64,
        cfg: &OptimConfig,
    ) -> Result<(), TchError> {
        self.steps += 1;
        let bias1 = 1.0 - cfg.beta1.powf(self.steps as f64);
        let bias2 = 1.0 - cfg.beta2.powf(self.steps as f64);
        // The f32 values the composition's kernels receive for these scalars; division by a scalar
        // runs as multiplication by its f32 reciprocal there.
        let scalars = AdamwScalars {
            grad_scale: scale as f32,
            w1: (1.0 - cfg.beta1) as f32,
            w2: (1.0 - cfg.beta2) as f32,
            inv_bias2: 1.0 / bias2.sqrt() as f32,
            eps: cfg.eps as f32,
            decay: (1.0 - lr * cfg.weight_decay) as f32,
            step_size: (lr / bias1) as f32,
        };
        let moments = (&self.exp_avg, &self.exp_avg_sq);
        if fused::adamw(param, grad, moments, self.master.as_ref(), &scalars)? {
            return Ok(());
        }
        let grad = grad.f_to_kind(Kind::Float)?.f_mul_scalar(scale)?;
        // m + (1 − β)(g − m) is β m + (1 − β) g in one kernel.
        let _ = self.exp_avg.f_lerp_(&grad, 1.0 - cfg.beta1)?;
        let _ = self.exp_avg_sq.f_lerp_(&grad.f_square()?, 1.0 - cfg.beta2)?;
        let denom = self
            .exp_avg_sq
            .f_sqrt()?
            .f_div_scalar_(bias2.sqrt())?
            .f_add_scalar_(cfg.eps)?;
        let mut target = self.target(param)?;
        let _ = target.f_mul_scalar_(1.0 - lr * cfg.weight_decay)?;
        let _ = target.f_sub_(&self.exp_avg.f_div(&denom)?.f_mul_scalar_(lr / bias1)?)?;
        if param.kind() != Kind::Float {
            param.shallow_clone().f_copy_(&target)?;
        }
        Ok(())
    }

    /// The f32 tensor the update is applied to: the master copy, the parameter itself when it is f32,
    /// else an f32 copy of it that [`Moments::update`] rounds back into the parameter.
    fn target(&self, param: &Tensor) -> Result<Tensor, TchError> {
        match &self.master {
            Some(master) => Ok(master.shallow_clone()),
            None if param.kind() == Kind::Float => Ok(param.shallow_clone()),
            None => param.f_to_kind(Kind::Float),
        }
    }
}

/// The L2 norm of all gradients together (the norm of the per-tensor norms), in f32, on the first
/// gradient's device; 0 when there are none. Reading it back is the step's one host synchronisation.
fn global_norm<'a>(grads: impl Iterator<Item = &'a Tensor>) -> Result<f64, TchError> {
    let grads: Vec<Tensor> = grads.map(Tensor::shallow_clone).collect();
    if let Some(norms) = foreach::norms(&grads, 2.0)? {
        return norms.f_norm()?.f_double_value(&[]);
    }
    let norms = grads
        .iter()
        .map(|grad| grad.f_norm_scalaropt_dtype(2.0, Kind::Float))
        .collect::<Result<Vec<_>, _>>()?;
    let Some(device) = norms.first().map(Tensor::device) else {
        return Ok(0.0);
    };
    let norms = norms
        .iter()
        .map(|norm| norm.f_to_device(device))
        .collect::<Result<Vec<_>, _>>()?;
    Tensor::f_stack(&norms, 0)?.f_norm()?.f_double_value(&[])
}

#[cfg(test)]
mod tests {
    use tch::{Device, Kind, Tensor};

    use super::*;
    use crate::optim::Partition;

    const LR: f64 = 1e-3;

    /// Three clipped steps with weight decay of `kind` parameters (with or without f32 masters) of
    /// `shape`, the kernel on or off; the optimizer's state and the parameter after them.
    fn three_steps(
        shape: &[i64],
        kind: Kind,
        master: bool,
        kernels: bool,
        device: Device,
    ) -> Vec<(String, Tensor)> {
        let p = noise(shape, 5)
            .to_device(device)
            .to_kind(kind)
            .set_requires_grad(true);
        let cfg = OptimConfig {
            lr: LR,
            weight_decay: 0.1,
            grad_clip: 0.5,
            fp32_master: master,
            ..OptimConfig::default()
        };
        let mut opt = AdamW::new(vec![("p".into(), p.shallow_clone())], &cfg).unwrap();
        for step in 0..3 {
            let g = noise(shape, 6 + step).to_device(device).to_kind(kind);
            (&p * g).sum(Kind::Float).backward();
            fused::set_enabled(kernels);
            let outcome = opt.step(cfg.lr);
            fused::set_enabled(true);
            assert!(matches!(
                outcome.unwrap(),
                StepOutcome::Applied { clipped: true, .. }
            ));
            opt.zero_grad().unwrap();
        }
        let mut state: Vec<(String, Tensor)> = opt.state().into_iter().map(|(n, t)| (n, t.copy())).collect();
        state.push(("param".into(), p.detach()));
        state
    }

    /// Values in [-1, 1) of `shape`, the same for the same `seed` (splitmix64). Drawn here rather
    /// than by libtorch's one global generator, which the tests running meanwhile on other
    /// threads seed and draw from: two optimizers compared to the bit must see the same values.
    fn noise(shape: &[i64], seed: u64) -> Tensor {
        let mut state = seed;
        let values: Vec<f32> = (0..shape.iter().product::<i64>())
            .map(|_| {
                state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
                let mut z = state;
                z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
                z ^= z >> 31;
                (z >> 40) as f32 / (1u64 << 23) as f32 - 1.0
            })
            .collect();
        Tensor::from_slice(&values).reshape(shape)
    }

    /// Four bf16 parameters (so with f32 masters); the same values on every call.
    fn bf16_params() -> Vec<(String, Tensor)> {
        [vec![7, 3], vec![5], vec![4, 4], vec![2]]
            .iter()
            .enumerate()
            .map(|(i, shape)| {
                let p = noise(shape, 11 + i as u64).to_kind(Kind::BFloat16);
                (format!("p{i}"), p.set_requires_grad(true))
            })
            .collect()
    }

    /// Gives each parameter of `opt` the gradient `g_i = (step + 1) * noise`, the same on every call
    /// with the same `step`, through a backward pass.
    fn backward_of_step(opt: &AdamW, step: i64) {
        for (i, p) in opt.parameters().iter().enumerate() {
            let g = noise(&p.size(), 100 * (step as u64 + 1) + i as u64) * (step + 1) as f64;
            (p * g.to_kind(Kind::BFloat16)).sum(Kind::Float).backward();
        }
    }

    fn by_name(mut state: Vec<(String, Tensor)>) -> Vec<(String, Tensor)> {
        state.sort_by(|a, b| a.0.cmp(&b.0));
        state
    }

    fn assert_same(a: &[(String, Tensor)], b: &[(String, Tensor)]) {
        assert_eq!(
            a.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            b.iter().map(|(n, _)| n).collect::<Vec<_>>()
        );
        for ((name, x), (_, y)) in a.iter().zip(b) {
            assert!(x.equal(y), "{name} differs");
        }
    }

    /// A NaN in one parameter's second moment reaches that parameter in the next update, and
    /// `first_non_finite` names it then (and nothing before the step), with or without f32 masters.
    #[test]
    fn a_nan_in_the_moments_is_named_after_the_step() {
        for fp32_master in [false, true] {
            let cfg = OptimConfig {
                lr: LR,
                fp32_master,
                ..OptimConfig::default()
            };
            let mut opt = AdamW::new(bf16_params(), &cfg).unwrap();
            let state = opt.state();
            let (_, v) = state.iter().find(|(n, _)| n == "exp_avg_sq/p2").unwrap();
            let _ = v.shallow_clone().fill_(f64::NAN);
            assert_eq!(opt.first_non_finite().unwrap(), None);
            backward_of_step(&opt, 0);
            assert!(matches!(opt.step(LR).unwrap(), StepOutcome::Applied { .. }));
            assert_eq!(opt.first_non_finite().unwrap(), Some("p2"));
        }
    }

    /// ZeRO stage 1 in one process: two optimizers keeping the two halves of the state (ranks 0
    /// and 1 of a partition) over copies of the same parameters and gradients, each parameter
    /// then copied from its owner (what the broadcast does), end each step with the unsharded
    /// optimizer's parameters to the bit; the two states together are the unsharded state, and
    /// a sharded optimizer restores its half from that whole state, refusing a stray entry.
    #[test]
    fn two_shards_update_as_one_and_restore_from_the_whole_state() {
        let cfg = OptimConfig {
            lr: LR,
            weight_decay: 0.1,
            grad_clip: 0.5,
            ..OptimConfig::default()
        };
        let sizes: Vec<i64> = bf16_params().iter().map(|(_, p)| p.numel() as i64).collect();
        let partition = Partition::balanced(&sizes, 2);
        let shard = |rank| Shard {
            partition: partition.clone(),
            rank,
        };
        let mut whole = AdamW::new(bf16_params(), &cfg).unwrap();
        let mut halves = [0, 1].map(|rank| AdamW::sharded(bf16_params(), &cfg, shard(rank)).unwrap());
        for step in 0..3 {
            for opt in std::iter::once(&mut whole).chain(halves.iter_mut()) {
                backward_of_step(opt, step);
                assert!(matches!(
                    opt.step(LR).unwrap(),
                    StepOutcome::Applied { clipped: true, .. }
                ));
                opt.zero_grad().unwrap();
            }
            let params = halves.each_ref().map(|h| h.parameters());
            tch::no_grad(|| {
                for (i, (of_0, of_1)) in params[0].iter().zip(&params[1]).enumerate() {
                    let (from, to) = match partition.owner(i) {
                        0 => (of_0, of_1),
                        _ => (of_1, of_0),
                    };
                    to.shallow_clone().copy_(from);
                }
            });
            for half in &params {
                for (i, (p, w)) in half.iter().zip(whole.parameters()).enumerate() {
                    assert!(p.equal(&w), "step {step}: parameter {i}");
                }
            }
        }
        let kept: Vec<(i64, i64)> = halves.iter().map(AdamW::kept_elements).collect();
        assert_eq!(kept[0].1 + kept[1].1, sizes.iter().sum::<i64>());
        assert_eq!(
            kept.iter().map(|k| k.0).collect::<Vec<_>>(),
            [3 * kept[0].1, 3 * kept[1].1]
        );
        let joined = by_name(halves.iter().flat_map(AdamW::state).collect());
        assert_same(&by_name(whole.state()), &joined);
        let mut restored = AdamW::sharded(bf16_params(), &cfg, shard(1)).unwrap();
        restored.load_state(&whole.state()).unwrap();
        assert_same(&by_name(restored.state()), &by_name(halves[1].state()));
        // What a resuming rank reads: its own parameters' entries alone.
        let all = whole.state();
        let kept = restored
            .entries_kept(all.iter().map(|(n, _)| n.as_str()))
            .unwrap();
        assert_eq!(kept.len(), halves[1].state().len());
        assert!(kept.len() < all.len() && !kept.is_empty());
        let share: Vec<(String, Tensor)> = all
            .iter()
            .filter(|(n, _)| kept.contains(n.as_str()))
            .map(|(n, t)| (n.clone(), t.shallow_clone()))
            .collect();
        let mut from_share = AdamW::sharded(bf16_params(), &cfg, shard(1)).unwrap();
        from_share.load_state(&share).unwrap();
        assert_same(&by_name(from_share.state()), &by_name(halves[1].state()));
        let mut stray = whole.state();
        stray.push(("exp_avg/nope".into(), Tensor::from(0f32)));
        let err = restored.load_state(&stray).unwrap_err();
        assert!(err.to_string().contains("`exp_avg/nope`"), "{err}");
        let wrong = Shard {
            partition: Partition::balanced(&sizes[1..], 2),
            rank: 0,
        };
        assert!(matches!(
            AdamW::sharded(bf16_params(), &cfg, wrong),
            Err(OptimError::Partition {
                tensors: 3,
                params: 4
            })
        ));
    }

    /// Released gradients give the updates zeroed ones give, to the bit, over three steps in which
    /// `p1` gets no gradient in the second: it is stepped with a zero gradient either way (its
    /// moments carry on). On a CUDA device the released gradients are gone until the next backward;
    /// elsewhere `release_grads` zeroes them, and the two runs are the same run.
    #[test]
    fn released_gradients_update_as_zeroed_ones() {
        let device = Device::cuda_if_available();
        let run = |release: bool| {
            let params = bf16_params()
                .into_iter()
                .map(|(n, p)| (n, p.detach().to_device(device).set_requires_grad(true)))
                .collect();
            let cfg = OptimConfig {
                lr: LR,
                weight_decay: 0.1,
                ..OptimConfig::default()
            };
            let mut opt = AdamW::new(params, &cfg).unwrap();
            for step in 0..3u64 {
                for (i, p) in opt.parameters().iter().enumerate() {
                    if step == 1 && i == 1 {
                        continue;
                    }
                    let g = noise(&p.size(), 100 * (step + 1) + i as u64).to_device(device);
                    (p * g.to_kind(Kind::BFloat16)).sum(Kind::Float).backward();
                }
                assert!(matches!(opt.step(LR).unwrap(), StepOutcome::Applied { .. }));
                if release {
                    opt.release_grads().unwrap();
                    let dropped = opt.parameters().iter().all(|p| !p.grad().defined());
                    assert_eq!(dropped, fused::active(device), "step {step}");
                } else {
                    opt.zero_grad().unwrap();
                }
            }
            let mut state: Vec<(String, Tensor)> =
                opt.state().into_iter().map(|(n, t)| (n, t.copy())).collect();
            state.extend(
                opt.parameters()
                    .into_iter()
                    .enumerate()
                    .map(|(i, p)| (format!("param {i}"), p.detach())),
            );
            state
        };
        let (released, zeroed) = (run(true), run(false));
        let moved = |state: &[(String, Tensor)]| {
            let step = state.iter().find(|(n, _)| n == "step/p1").unwrap();
            step.1.int64_value(&[])
        };
        assert_eq!((moved(&released), moved(&zeroed)), (3, 3));
        assert_same(&released, &zeroed);
    }

    /// On a CUDA device (`scripts/gpu/run.sh kernels` on the GPU machine) the one-kernel update gives
    /// what the composition of libtorch operations gives: the moments within a relative 1e-6 (equal
    /// bit for bit on an H100), the f32 masters and parameters within 1e-6 of their value plus the
    /// step's size, lr (on an H100 0.7% of the masters differ: the two round some operation of the
    /// step differently), the bf16 parameters within one bf16 unit
    /// (a master one f32 unit apart can round either way); the count of values that differ at all is
    /// printed. Elsewhere it says it was skipped. It switches the kernels off for a moment, on its
    /// own thread ([`fused::set_enabled`]).
    #[test]
    fn the_cuda_kernel_updates_as_the_composition() {
        let device = Device::cuda_if_available();
        if !fused::active(device) {
            eprintln!("skipped: no CUDA device in this build or machine");
            return;
        }
        // 37,000 values: the kernel's groups of four alone; 36,963: three more after them.
        for (shape, kind, master) in [
            ([1000, 37], Kind::BFloat16, true),
            ([1000, 37], Kind::BFloat16, false),
            ([1000, 37], Kind::Float, false),
            ([999, 37], Kind::BFloat16, true),
            ([999, 37], Kind::Float, false),
        ] {
            let kernel = three_steps(&shape, kind, master, true, device);
            let composition = three_steps(&shape, kind, master, false, device);
            assert_eq!(kernel.len(), composition.len());
            for ((name, got), (_, want)) in kernel.iter().zip(&composition) {
                let (got64, want64) = (got.to_kind(Kind::Double), want.to_kind(Kind::Double));
                let differ = got.ne_tensor(want).sum(Kind::Int64).int64_value(&[]);
                let largest = (&got64 - &want64).abs().max().double_value(&[]);
                eprintln!(
                    "{kind:?}, master {master}, {name}: {differ} of {} values differ, by at most {largest:.3e}",
                    got.numel()
                );
                let tolerance = if got.kind() == Kind::BFloat16 {
                    1.0 / 128.0
                } else {
                    1e-6
                };
                let floor = if name.starts_with("exp_avg") { 0.0 } else { LR };
                let excess = ((&got64 - &want64).abs() - (want64.abs() + floor) * tolerance)
                    .max()
                    .double_value(&[]);
                assert!(
                    excess <= 0.0,
                    "{kind:?}, master {master}, {name}: off by {excess}"
                );
            }
        }
    }
}
