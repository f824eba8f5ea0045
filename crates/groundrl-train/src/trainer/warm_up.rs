//! The supervised warm-up (`[sft]`): cross-entropy on reference answers before GRPO, so that the
//! policy's first rollouts already have the answer's format; with `sft.val_freq`, validated as it
//! goes, stopped early (`sft.patience`) and ended on its best validation's weights.

use std::time::Instant;

use groundrl_core::rng::keyed;
use groundrl_core::telemetry::JsonlLog;
use groundrl_score::data::Sample;
use groundrl_tensor::processor::Encoded;
use serde::{Deserialize, Serialize};
use tch::{Device, Tensor};

use super::start::{Place, new_optimizer};
use super::{TrainError, Trainer, setup, skips};
use crate::data_parallel::counts_over_ranks;
use crate::dataset::{Dataset, epoch_order};
use crate::fault;
use crate::run_folder::SFT_FILE;
use crate::update::{Row, SftSettings, sft_step};

/// One line of the warm-up log.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SftRecord {
    /// 1-based warm-up step.
    pub step: u32,
    /// Mean negative log-likelihood per answer token, before the step's update.
    pub loss: f64,
    pub grad_norm: f64,
    pub lr: f64,
    /// False when non-finite gradients made the optimizer skip the step.
    pub applied: bool,
    pub answer_tokens: u64,
    /// Prompt and answer tokens through the model per second (every rank's, in a data-parallel run).
    pub tokens_per_s: f64,
    pub seconds: f64,
    /// Greedy accuracy on the validation samples after this step, on the steps `sft.val_freq`
    /// names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub val_accuracy: Option<f64>,
}

/// The warm-up's best validation so far: saved in checkpoints (in [`super::RunState`]).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct SftBest {
    /// The warm-up step (1-based) whose weights validated best.
    pub step: u32,
    pub accuracy: f64,
}

/// The weights of the warm-up's best validation, kept on the CPU (so the GPU holds no second copy
/// of the trained tensors), in the order of the trainer's trainable tensors.
#[derive(Default)]
struct BestWeights(Vec<Tensor>);

impl BestWeights {
    fn keep(&mut self, trainable: &[(String, Tensor)]) {
        self.0 = trainable
            .iter()
            .map(|(_, t)| match t.device() {
                // `to_device` hands back the tensor itself when it is on the CPU already.
                Device::Cpu => t.detach().copy(),
                _ => t.detach().to_device(Device::Cpu),
            })
            .collect();
    }

    /// Copies the kept weights back into `trainable`; false when none were kept.
    fn restore(&self, trainable: &[(String, Tensor)]) -> bool {
        if self.0.len() != trainable.len() {
            return false;
        }
        tch::no_grad(|| {
            for ((_, t), best) in trainable.iter().zip(&self.0) {
                let mut t = t.shallow_clone();
                t.copy_(best);
            }
        });
        true
    }
}

impl Trainer {
    /// Runs the supervised warm-up (`[sft]`) to its last step, unless done; `on_step` sees each
    /// step's record. GRPO then starts from a fresh optimizer, and a checkpoint is saved (unless
    /// `trainer.save_freq` is 0) so that a resumed run never repeats the warm-up.
    pub fn warm_up(&mut self, mut on_step: impl FnMut(&SftRecord)) -> Result<(), TrainError> {
        let steps = self.cfg.sft.steps;
        if self.state.sft_step >= steps || self.state.sft_stopped {
            return Ok(());
        }
        let path = self.run_dir.join(SFT_FILE);
        let mut log = self.writes().then(|| JsonlLog::open(path)).transpose()?;
        let mut best = BestWeights::default();
        while self.state.sft_step < steps && !self.state.sft_stopped {
            let mut record = self.warm_up_step()?;
            if self.cfg.sft.validates_after(record.step) {
                let (accuracy, _) = self.validate()?;
                record.val_accuracy = Some(accuracy);
                self.track_warm_up_best(&mut best, record.step, accuracy);
            }
            if let Some(log) = &mut log {
                log.append(&record)?;
            }
            let scalars = [
                ("sft/loss".to_string(), record.loss),
                ("sft/lr".to_string(), record.lr),
            ]
            .into_iter()
            .chain(record.val_accuracy.map(|a| ("sft/val_accuracy".to_string(), a)));
            if let Some(logs) = &mut self.logs {
                logs.events
                    .add_scalars(u64::from(record.step), &scalars.collect::<Vec<_>>())?;
            }
            on_step(&record);
            self.evaluate_curve_point("sft", u64::from(record.step))?;
            fault::point(fault::WARM_UP);
        }
        self.end_on_best_weights(&best);
        self.optimizer = new_optimizer(&self.trainable, &self.cfg, Place::of(self.dp.as_ref()))?;
        if self.cfg.trainer.save_freq > 0 {
            self.save()?;
        }
        Ok(())
    }

    /// Keeps the weights of a better validation, or counts one more without gain; after
    /// `sft.patience` of them in a row the rate drops (`sft.rate_drops` times, the count starting
    /// again) and then the warm-up stops. Every rank validates alike, so all decide alike.
    fn track_warm_up_best(&mut self, best: &mut BestWeights, step: u32, accuracy: f64) {
        if self.state.sft_best.is_none_or(|b| accuracy > b.accuracy) {
            self.state.sft_best = Some(SftBest { step, accuracy });
            self.state.sft_validations_without_gain = 0;
            best.keep(&self.trainable);
            return;
        }
        self.state.sft_validations_without_gain += 1;
        let patience = self.cfg.sft.patience;
        if patience == 0 || self.state.sft_validations_without_gain < patience {
            return;
        }
        if self.state.sft_rate_drops < self.cfg.sft.rate_drops {
            self.state.sft_rate_drops += 1;
            self.state.sft_validations_without_gain = 0;
        } else {
            self.state.sft_stopped = true;
        }
    }

    /// Puts back the weights of the best validation when a later step's are in the model, and says
    /// where the warm-up ended.
    fn end_on_best_weights(&mut self, best: &BestWeights) {
        let Some(b) = self.state.sft_best else {
            return;
        };
        let last = self.state.sft_step;
        let restored = b.step != last && best.restore(&self.trainable);
        if !self.writes() {
            return;
        }
        let why = match self.state.sft_stopped {
            true => format!(
                "stopped early after step {last} ({} validations without a better accuracy{})",
                self.state.sft_validations_without_gain,
                match self.state.sft_rate_drops {
                    0 => String::new(),
                    drops => format!(" after {drops} rate drops"),
                }
            ),
            false => format!("ended at step {last}"),
        };
        let weights = match (b.step == last, restored) {
            (true, _) => format!("on step {last}'s weights"),
            (false, true) => format!("back on step {}'s weights", b.step),
            // A resumed warm-up does not have the best weights of before its checkpoint.
            (false, false) => format!(
                "on step {last}'s weights (step {}'s, validated best, were not kept across the resume)",
                b.step
            ),
        };
        eprintln!(
            "warm-up {why}; {weights}, validation accuracy {:.1}%",
            100.0 * b.accuracy
        );
    }

    /// One warm-up step: the reference answers of the next `sft.batch_size` training samples (in
    /// the warm-up's own seeded order), one optimizer step of cross-entropy on them. In a
    /// data-parallel run every rank computes the same batch and takes its contiguous share of it;
    /// the record and the count of skipped samples are the whole batch's, as one process has them.
    fn warm_up_step(&mut self) -> Result<SftRecord, TrainError> {
        let start = Instant::now();
        let step = self.state.sft_step;
        let indices = self.warm_up_indices(step);
        let mine = self
            .dp
            .as_ref()
            .map_or(0..indices.len(), |dp| dp.share(indices.len()));
        let mut examples: Vec<(Encoded, Encoded, Vec<bool>)> = Vec::new();
        let mut failed = Vec::new();
        for &index in &indices[mine] {
            let sample = &self.warm_up_set().samples[index];
            match self.reference_example(sample) {
                Ok(example) => examples.push(example),
                Err(e) => failed.push((index, sample.id.clone(), e)),
            }
        }
        for (index, id, e) in failed {
            self.skip_sample(skips::key("warm-up", index), &id, format!("in the warm-up: {e}"));
        }
        self.share_skips()?;
        let [examples_in_all] = counts_over_ranks(self.dp.as_mut(), [examples.len() as u64])?;
        if examples_in_all == 0 {
            return Err(setup(format!(
                "warm-up step {}: none of its samples has a reference answer (see above)",
                step + 1
            )));
        }
        let rows: Vec<Row> = examples
            .iter()
            .map(|(prompt, response, generated)| Row {
                prompt,
                response,
                generated,
                advantage: 0.0,
                counts: true,
                prompt_features: None,
            })
            .collect();
        let lr = self.cfg.sft.lr_at(step, self.state.sft_rate_drops);
        let settings = SftSettings {
            micro_batch_size: self.cfg.trainer.micro_batch_size as usize,
            recompute: self.cfg.model.gradient_checkpointing.recompute(),
            logprob_chunk: i64::from(self.cfg.trainer.logprob_chunk),
            lr,
        };
        let report = sft_step(
            self.policy.model.as_ref(),
            &self.policy.processor,
            &mut self.optimizer,
            &rows,
            &settings,
            self.dp.as_mut(),
        )?;
        self.state.sft_step += 1;
        let seconds = start.elapsed().as_secs_f64();
        Ok(SftRecord {
            step: self.state.sft_step,
            loss: report.loss,
            grad_norm: report.grad_norm,
            lr,
            applied: report.applied,
            answer_tokens: report.answer_tokens,
            tokens_per_s: report.tokens as f64 / seconds.max(1e-9),
            seconds,
            val_accuracy: None,
        })
    }

    /// The samples the warm-up draws from.
    fn warm_up_set(&self) -> &Dataset {
        self.warm_up_data.as_ref().unwrap_or(&self.train)
    }

    /// The samples of warm-up step `step`: positions `step * batch_size ..` of the
    /// concatenated epoch orders of the warm-up's seed, so a resumed warm-up sees the same batches.
    fn warm_up_indices(&self, step: u32) -> Vec<usize> {
        let len = self.warm_up_set().len();
        let size = self.cfg.sft.batch_size as usize;
        let seed = keyed(self.cfg.data.seed, "sft");
        let first = step as usize * size;
        let mut order: Option<(usize, Vec<usize>)> = None;
        (first..first + size)
            .map(|position| {
                let epoch = position / len;
                if order.as_ref().is_none_or(|(e, _)| *e != epoch) {
                    order = Some((epoch, epoch_order(len, seed, epoch as u64)));
                }
                order.as_ref().map_or(0, |(_, o)| o[position % len])
            })
            .collect()
    }

    /// A sample's prompt and its reference response: the answer's tokens ended by the end-of-turn
    /// token, after a zoom call and its (masked) reply for the small targets `[tools]` names. `Err`
    /// is why the sample has none, a message printed as the sample is skipped.
    fn reference_example(&self, sample: &Sample) -> Result<(Encoded, Encoded, Vec<bool>), String> {
        let prompt = self
            .inference
            .encode(&self.policy.processor, sample, &self.warm_up_set().base, None)
            .map_err(|e| e.to_string())?;
        let (response, generated) = self.tools.reference_response(
            &self.inference,
            &self.policy.processor,
            sample,
            prompt.view.frames,
            &prompt.image,
            self.inference.tools_on() || self.scorer.reads_confidence(),
        )?;
        Ok((prompt.encoded, response, generated))
    }
}
