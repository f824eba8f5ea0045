//! Rollouts: the step's prompts drawn in the seeded epoch order, encoded, and answered by the
//! engine `rollout.n` times each (greedily once for validation and evaluation), with DAPO's dynamic
//! sampling drawing more prompts when groups carry no signal.

use std::path::Path;
use std::time::Instant;

use groundrl_core::data::Sample;
use groundrl_core::frame::{ImageFrames, Size};
use groundrl_core::rng::keyed;
use groundrl_core::telemetry::CompletionRecord;
use groundrl_core::tool::View;
use groundrl_tensor::hf_folder::HfModel;
use groundrl_tensor::processor::{Encoded, Processor};
use groundrl_tensor::rollout::{
    Engine, GenerationRequest, SamplingParams, ToolRequest, ToolRollout, Trajectory,
};
use image::RgbImage;

use super::{TrainError, Trainer, setup};
use crate::advantage::informative_groups;
use crate::dataset::epoch_order;

impl Trainer {
    /// Samples `rollout.n` completions of the step's prompts and scores them. With dynamic sampling,
    /// groups whose rewards are all equal are dropped and more prompts are drawn, up to
    /// `rollout.max_prompts_per_step` in all.
    pub(super) fn rollouts(&mut self) -> Result<Rollouts, TrainError> {
        let r = &self.cfg.rollout;
        let wanted = r.prompts_per_step as usize;
        let dynamic = r.dynamic_sampling;
        let cap = if dynamic {
            (r.max_prompts_per_step as usize).max(wanted)
        } else {
            wanted
        };
        let mut kept: Vec<Group> = Vec::new();
        let mut scored: Vec<CompletionRecord> = Vec::new();
        let mut dropped = 0;
        let mut drawn = 0;
        while kept.len() < wanted && drawn < cap {
            let indices = self.next_indices((wanted - kept.len()).min(cap - drawn));
            let seed = keyed(
                self.cfg.trainer.seed,
                &format!("step {} draw {drawn}", self.state.step),
            );
            drawn += indices.len();
            let groups = self.sample_groups(&indices, seed, Split::Train)?;
            self.log_pass_rates(&groups, seed)?;
            for group in groups {
                let group_id = kept.len() + dropped;
                scored.extend(group.records.iter().map(|r| CompletionRecord {
                    group: group_id,
                    ..r.clone()
                }));
                if !dynamic || group.informative() {
                    kept.push(group);
                } else {
                    dropped += 1;
                }
            }
        }
        for (i, group) in kept.iter_mut().enumerate() {
            group.records.iter_mut().for_each(|r| r.group = i);
        }
        if scored.is_empty() {
            return Err(setup(format!(
                "step {}: none of the {drawn} prompts drawn could be encoded and scored (see above)",
                self.state.step + 1
            )));
        }
        Ok(Rollouts {
            kept,
            scored,
            dropped,
        })
    }

    /// The next `count` sample indices in the epoch order, moving to the next epoch at its end.
    fn next_indices(&mut self, count: usize) -> Vec<usize> {
        let len = self.train.len();
        let mut out = Vec::with_capacity(count);
        while out.len() < count {
            let order = epoch_order(len, self.cfg.data.seed, self.state.epoch);
            let take = (count - out.len()).min(len - self.state.cursor);
            out.extend_from_slice(&order[self.state.cursor..self.state.cursor + take]);
            self.state.cursor += take;
            if self.state.cursor == len {
                self.state.cursor = 0;
                self.state.epoch += 1;
            }
        }
        out
    }

    /// Encodes, samples and scores the samples at `indices` of a split: `rollout.n` sampled
    /// completions each from the train set, one greedy completion each from the others. Samples
    /// that cannot be encoded or scored are skipped and counted in [`RunState::bad_samples`].
    pub(super) fn sample_groups(
        &mut self,
        indices: &[usize],
        seed: u64,
        split: Split,
    ) -> Result<Vec<Group>, TrainError> {
        let (n, temperature) = match split {
            Split::Train => (self.cfg.rollout.n as usize, self.temperature()),
            _ => (1, 0.0),
        };
        self.sample_groups_with(indices, seed, split, n, temperature)
    }

    /// [`Self::sample_groups`] with `n` completions per sample at `temperature` (0: greedy).
    pub(super) fn sample_groups_with(
        &mut self,
        indices: &[usize],
        seed: u64,
        split: Split,
        n: usize,
        temperature: f64,
    ) -> Result<Vec<Group>, TrainError> {
        let data = match split {
            Split::Train => &self.train,
            Split::Val => &self.val,
            Split::Test => &self.test,
        };
        let mut groups = Vec::new();
        let encode_start = Instant::now();
        for &index in indices {
            let sample = &data.samples[index];
            match self.encode(sample, &data.base) {
                Ok(prompt) => groups.push(Group::new(index, groups.len(), prompt)),
                Err(e) => {
                    eprintln!("skipped sample {}: {e}", sample.id);
                    self.state.bad_samples += 1;
                }
            }
        }
        self.rollout_seconds.encode += encode_start.elapsed().as_secs_f64();
        if groups.is_empty() {
            return Ok(groups);
        }
        let generate_start = Instant::now();
        for t in self.generate(&groups, seed, n, temperature)? {
            groups[t.prompt_index].completions.push(t);
        }
        self.rollout_seconds.generate += generate_start.elapsed().as_secs_f64();
        let mut scored = Vec::with_capacity(groups.len());
        for (position, mut group) in groups.into_iter().enumerate() {
            match self.score_group(&data.samples[group.index], &group, position) {
                Ok(records) => {
                    group.records = records;
                    scored.push(group);
                }
                Err(e) => {
                    eprintln!("skipped: {e}");
                    self.state.bad_samples += 1;
                }
            }
        }
        Ok(scored)
    }

    /// A sample's prompt as the model sees it (with the tools offered, when there are any), its
    /// first image and the full view of that image.
    pub(super) fn encode(&self, sample: &Sample, base: &Path) -> Result<Prompt, String> {
        let processor = &self.policy.processor;
        let (encoded, images) = processor
            .encode_sample_with(sample, base, None, self.tools.prompt.as_ref())
            .map_err(|e| e.to_string())?;
        check_declared_sizes(sample, &images)?;
        let frames = self.frames_of(sample, &encoded)?;
        let image = images
            .into_iter()
            .next()
            .ok_or_else(|| format!("sample {}: no image in its prompt", sample.id))?
            .to_rgb8();
        Ok(Prompt {
            encoded,
            image,
            view: View::full(frames),
        })
    }

    /// The original and resized sizes of the sample's first image, as the processor resized it.
    fn frames_of(&self, sample: &Sample, encoded: &Encoded) -> Result<ImageFrames, String> {
        match (
            sample.images.first(),
            resized_size(&self.policy.processor, encoded),
        ) {
            (Some(image), Some([width, height])) => Ok(ImageFrames {
                original: Size::new(f64::from(image.width), f64::from(image.height)),
                resized: Size::new(width as f64, height as f64),
            }),
            _ => Err(format!("sample {}: no image in its prompt", sample.id)),
        }
    }

    /// `n` trajectories of every group's prompt at `temperature`, tools answered between turns.
    fn generate(
        &self,
        groups: &[Group],
        seed: u64,
        n: usize,
        temperature: f64,
    ) -> Result<Vec<Trajectory>, TrainError> {
        let r = &self.cfg.rollout;
        let stops = stop_ids(&self.policy);
        let requests: Vec<ToolRequest> = groups
            .iter()
            .map(|g| ToolRequest {
                request: GenerationRequest {
                    prompt: g.encoded.share(),
                    n,
                    first_sample: 0,
                    params: SamplingParams {
                        seed: draw_seed(seed, g.position),
                        temperature,
                        top_p: r.top_p,
                        top_k: i64::from(r.top_k),
                        max_new_tokens: r.max_new_tokens as usize,
                        stop_token_ids: stops.clone(),
                        stop_strings: Vec::new(),
                    },
                },
                image: &g.image,
                view: g.view,
            })
            .collect();
        let engine = Engine::new(&self.policy.model, &self.policy.processor);
        let rollout = ToolRollout {
            engine: &engine,
            processor: &self.policy.processor,
            toolbox: &self.tools.toolbox,
            model_frame: self.scorer.spec.model_frame,
            limits: self.tools.limits,
        };
        Ok(rollout.generate(&requests)?)
    }
}

/// The datasets of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Split {
    Train,
    Val,
    Test,
}

/// A step's rollouts: the groups it trains on, and the records of every group scored (dropped ones
/// too, so the step's statistics describe all that was sampled).
pub(super) struct Rollouts {
    pub(super) kept: Vec<Group>,
    pub(super) scored: Vec<CompletionRecord>,
    /// Groups dropped by dynamic sampling (all rewards equal).
    pub(super) dropped: usize,
}

/// A sample's prompt as the model sees it, with what its tools work on.
pub(super) struct Prompt {
    pub(super) encoded: Encoded,
    /// The prompt's (first) image, original size: what a zoom crops.
    pub(super) image: RgbImage,
    /// That image as the prompt shows it.
    pub(super) view: View,
}

/// One prompt's completions with their scores.
pub(super) struct Group {
    /// The sample's index in its dataset.
    pub(super) index: usize,
    /// Its position in the draw, which seeds its completions ([`draw_seed`]).
    pub(super) position: usize,
    pub(super) encoded: Encoded,
    pub(super) image: RgbImage,
    pub(super) view: View,
    pub(super) completions: Vec<Trajectory>,
    pub(super) records: Vec<CompletionRecord>,
}

impl Group {
    fn new(index: usize, position: usize, prompt: Prompt) -> Self {
        Self {
            index,
            position,
            encoded: prompt.encoded,
            image: prompt.image,
            view: prompt.view,
            completions: Vec::new(),
            records: Vec::new(),
        }
    }

    /// Some rewards differ, so the group has a learning signal (DAPO's dynamic sampling keeps these).
    fn informative(&self) -> bool {
        let rewards: Vec<f64> = self.records.iter().map(|r| r.reward).collect();
        informative_groups(&rewards, &vec![0; rewards.len()]).is_ok_and(|v| v.first() == Some(&true))
    }
}

/// The sampling seed of the prompt at `position` in a draw seeded `seed`: by position, so a sample
/// drawn twice in one step (at an epoch's end and the next one's start) gets different completions.
pub(super) fn draw_seed(seed: u64, position: usize) -> u64 {
    keyed(seed, &position.to_string())
}

/// Refuses a sample whose images' declared sizes are not the decoded images' sizes: its targets are
/// read in the declared frame, so a wrong size would silently mis-score every answer.
fn check_declared_sizes(sample: &Sample, images: &[image::DynamicImage]) -> Result<(), String> {
    for (declared, decoded) in sample.images.iter().zip(images) {
        let (width, height) = (decoded.width(), decoded.height());
        if (declared.width, declared.height) != (width, height) {
            return Err(format!(
                "sample {}: {} declares {}x{} pixels, but the image is {width}x{height}",
                sample.id, declared.path, declared.width, declared.height
            ));
        }
    }
    Ok(())
}

/// Tokens of a trajectory the model generated (its tool turns left out).
pub(super) fn generated_tokens(t: &Trajectory) -> usize {
    t.generated.iter().filter(|&&g| g).count()
}

/// The model's end-of-sequence ids and the tokenizer's eos: a completion ends at any of them.
fn stop_ids(policy: &HfModel) -> Vec<i64> {
    let mut ids = policy.model.config.text.eos_token_ids.clone();
    let eos = i64::from(policy.processor.tokenizer.special_ids().eos);
    if !ids.contains(&eos) {
        ids.push(eos);
    }
    ids
}

/// The `[width, height]` in pixels the processor resized the prompt's first image to (its patch grid
/// times the patch size).
pub(super) fn resized_size(processor: &Processor, encoded: &Encoded) -> Option<[u64; 2]> {
    let patch = u64::from(processor.image.patch_size);
    encoded
        .image_grids
        .first()
        .map(|g| [g[2] as u64 * patch, g[1] as u64 * patch])
}
