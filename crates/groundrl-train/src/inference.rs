//! A model answering samples as training asks them: the prompt encoded as the trainer encodes it
//! (the sample's own chat, or its task's prompt preset; the run's tools offered), trajectories from
//! the rollout engine (the tools' replies between turns), and the final answer read in original
//! pixels as the held-out evaluation reads it. `groundrl predict` and `groundrl eval model` answer
//! through it, so a run's model answers there exactly as it did in the run's evaluation.

use std::cell::RefCell;
use std::path::Path;

use groundrl_core::prompt::PromptStyle;
use groundrl_core::prompt::tools::tool_instruction;
use groundrl_core::telemetry::EvalRecord;
use groundrl_core::telemetry::stats::target_size;
use groundrl_core::tool::answer::answer_in_full_view;
use groundrl_core::tool::{AnswerView, Toolbox, View};
use groundrl_score::data::Sample;
use groundrl_score::frame::{Frame, ImageFrames, Size};
use groundrl_score::geometry::{LabeledBox, Point};
use groundrl_score::metrics::grounding::resolve::{Resolved, read_completion, resolve};
use groundrl_score::metrics::grounding::{Answer, RawAnswer};
use groundrl_score::parse::{self, parse_completion};
use groundrl_score::resize::PixelBudget;
use groundrl_score::reward::RewardSpec;
use groundrl_tensor::hf_folder::HfModel;
use groundrl_tensor::model::{Grid, Model};
use groundrl_tensor::model_error::ModelError;
use groundrl_tensor::processor::{Encoded, Processor, ProcessorError, ToolPrompt};
use groundrl_tensor::qwen2_5_vl::vision::patch_count;
use groundrl_tensor::rollout::{
    Engine, EngineCache, FinishReason, GenerationRequest, RolloutError, SamplingParams, ToolRequest,
    ToolRollout, Trajectory, TurnLimits,
};
use image::RgbImage;
use rayon::prelude::*;
use tch::Tensor;

use crate::config::TrainConfig;

/// Call shapes whose decoding tensors (KV cache, captured CUDA graph) the engine keeps between
/// [`Inference::generate`] calls: a training step's sampled rollouts and the greedy batches of the
/// validation between steps (or an evaluation's batches and its last, smaller one). More would hold
/// more KV caches in device memory through the update (`crate::plan` counts these two).
pub const KEPT_SHAPES: usize = 2;

/// Why a sample's prompt could not be encoded; each case names the sample. A caller that walks a
/// dataset skips such a sample and counts it.
#[derive(Debug, thiserror::Error)]
pub enum PromptError {
    /// Its images could not be read or its chat not rendered.
    #[error(transparent)]
    Encode(#[from] ProcessorError),
    #[error("sample {sample}: no image in its prompt")]
    NoImage { sample: String },
    /// An image's declared size is not the decoded image's: its targets, read in the declared
    /// frame, would be mis-scored.
    #[error(
        "sample {sample}: {path} declares {}x{} pixels, but the image is {}x{}",
        declared[0], declared[1], decoded[0], decoded[1]
    )]
    DeclaredSize {
        sample: String,
        path: String,
        declared: [u32; 2],
        decoded: [u32; 2],
    },
}

/// How a model is asked and how its answers are read.
#[derive(Debug)]
pub struct Inference {
    /// The tools offered (empty without `[tools]`).
    pub toolbox: Toolbox,
    /// The tools' schemas and instruction added to every prompt; `None` without tools.
    pub tool_prompt: Option<ToolPrompt>,
    pub limits: TurnLimits,
    /// The image a final answer is about: the full screenshot, or the last zoomed view.
    pub answer_view: AnswerView,
    /// The frame the model writes coordinates in and a sample without a prompt of its own is asked
    /// in (the reward spec's `model_frame`, `auto` settled by the model's family).
    pub model_frame: Frame,
    /// Let an answer's numbers pick their frame when they do not fit `model_frame`.
    pub detect_frame: bool,
    pub top_p: f64,
    /// 0: off.
    pub top_k: i64,
    /// Tokens the model may write in one turn.
    pub max_new_tokens: usize,
    /// Keep the rollout engine's tensors (fused weights, KV caches, CUDA graphs) from one
    /// [`Self::generate`] call to the next (`rollout.keep_engine`); false frees them after each call.
    pub keep_engine: bool,
    /// What the engine kept from the last calls.
    engine: RefCell<EngineCache>,
}

impl Inference {
    /// As the run of `cfg` asks: its tools and turn limits, `rollout.top_p`, `top_k` and
    /// `max_new_tokens`, and the frame of its reward spec `spec` (read for the run's model:
    /// [`crate::config::RewardConfig::spec_for`]).
    pub fn of_run(cfg: &TrainConfig, spec: &RewardSpec) -> Self {
        let t = &cfg.tools;
        let budget = PixelBudget {
            min_pixels: cfg.model.min_pixels,
            max_pixels: cfg.model.max_pixels,
        };
        let toolbox = t.toolbox(budget);
        let max_new = cfg.rollout.max_new_tokens;
        let (tool_prompt, limits) = if toolbox.is_empty() {
            (None, one_turn(max_new as usize))
        } else {
            let prompt = ToolPrompt {
                schemas: toolbox.schemas(),
                instruction: tool_instruction(t.answer_view, t.max_turns.saturating_sub(1)),
            };
            let limits = TurnLimits {
                max_turns: t.max_turns as usize,
                max_total_tokens: t.total_token_budget(max_new, cfg.model.max_pixels) as usize,
            };
            (Some(prompt), limits)
        };
        Self {
            toolbox,
            tool_prompt,
            limits,
            answer_view: t.answer_view,
            model_frame: spec.model_frame,
            detect_frame: spec.detect_frame,
            top_p: cfg.rollout.top_p,
            top_k: i64::from(cfg.rollout.top_k),
            max_new_tokens: max_new as usize,
            keep_engine: cfg.rollout.keep_engine,
            engine: RefCell::new(EngineCache::new(KEPT_SHAPES)),
        }
    }

    /// Plain generation: no tools, one turn of at most `max_new_tokens`, answers read in
    /// `model_frame`.
    pub fn plain(max_new_tokens: usize, model_frame: Frame, detect_frame: bool) -> Self {
        Self {
            toolbox: Toolbox::new(Vec::new()),
            tool_prompt: None,
            limits: one_turn(max_new_tokens),
            answer_view: AnswerView::Full,
            model_frame,
            detect_frame,
            top_p: 1.0,
            top_k: 0,
            max_new_tokens,
            keep_engine: true,
            engine: RefCell::new(EngineCache::new(KEPT_SHAPES)),
        }
    }

    pub fn tools_on(&self) -> bool {
        self.tool_prompt.is_some()
    }

    /// `sample`'s prompt as the model sees it, with the tools offered when there are any; `style`
    /// words a sample that carries no prompt of its own (`None`: its task's default, answers asked
    /// in [`Self::model_frame`]).
    pub fn encode(
        &self,
        processor: &Processor,
        sample: &Sample,
        base: &Path,
        style: Option<&PromptStyle>,
    ) -> Result<Prompt, PromptError> {
        let unprompted = PromptStyle::unprompted(sample.task, self.model_frame);
        let style = style.unwrap_or(&unprompted);
        encode_prompt(processor, sample, base, style, self.tool_prompt.as_ref())
    }

    /// [`Self::encode`] of each of `samples` (their task's default wording), in order, on the
    /// CPU's cores: decoding and resizing a step's screenshots one after the other kept the GPU
    /// idle for about 0.1 s a step (docs/performance.md).
    pub fn encode_all(
        &self,
        processor: &Processor,
        samples: &[&Sample],
        base: &Path,
    ) -> Vec<Result<Prompt, PromptError>> {
        let (frame, tools) = (self.model_frame, self.tool_prompt.as_ref());
        samples
            .par_iter()
            .map(|sample| {
                let style = PromptStyle::unprompted(sample.task, frame);
                encode_prompt(processor, sample, base, &style, tools)
            })
            .collect()
    }

    /// `n` trajectories of each prompt at `temperature` (0: greedy), prompt `i` seeded by
    /// `prompts[i].1`, tools answered between turns. The engine starts from what the last call kept
    /// (see [`Self::keep_engine`]): its fused weights refreshed in place from `hf`'s current values,
    /// a call shape met before served by its kept tensors and captured step. Completions do not depend
    /// on what was kept (`tests/trainer.rs` checks it over a run).
    pub fn generate(
        &self,
        hf: &HfModel,
        prompts: &[(&Prompt, u64)],
        n: usize,
        temperature: f64,
    ) -> Result<Vec<Trajectory>, RolloutError> {
        let stops = stop_ids(hf);
        let requests: Vec<ToolRequest> = prompts
            .iter()
            .map(|&(prompt, seed)| ToolRequest {
                request: GenerationRequest {
                    prompt: prompt.encoded.share(),
                    n,
                    first_sample: 0,
                    params: SamplingParams {
                        seed,
                        temperature,
                        top_p: self.top_p,
                        top_k: self.top_k,
                        max_new_tokens: self.max_new_tokens,
                        stop_token_ids: stops.clone(),
                        stop_strings: Vec::new(),
                    },
                    features: prompt.features.as_ref().map(Tensor::shallow_clone),
                },
                image: &prompt.image,
                view: prompt.view,
            })
            .collect();
        let engine = Engine::with_cache(hf.model.as_ref(), &hf.processor, self.engine.take());
        let rollout = ToolRollout {
            engine: &engine,
            processor: &hf.processor,
            toolbox: &self.toolbox,
            model_frame: self.model_frame,
            limits: self.limits,
        };
        let trajectories = rollout.generate(&requests);
        let mut kept = engine.into_cache();
        if !self.keep_engine {
            kept.clear();
        }
        self.engine.replace(kept);
        trajectories
    }

    /// Sizes the engine's KV caches for prompts with their completions of up to `columns` tokens
    /// (`EngineCache::set_min_columns`): the trainer passes its pixel budget's longest row
    /// (`crate::plan::row_tokens`), so that every step's sampling has one shape whatever its prompts'
    /// lengths, and the engine keeps one KV cache and captured step for all steps.
    pub fn set_cache_columns(&mut self, columns: u64) {
        self.engine.get_mut().set_min_columns(columns as i64);
    }

    /// Decoding tensors the engine has made over all calls: one per call whose shape was not kept
    /// (each a CUDA graph capture on a GPU).
    pub fn sessions_made(&self) -> usize {
        self.engine.borrow().sessions_made()
    }

    /// The image a trajectory's final answer is about.
    pub fn shown<'a>(&self, trajectory: &'a Trajectory, full: &'a View) -> &'a View {
        match self.answer_view {
            AnswerView::Full => full,
            AnswerView::Last => &trajectory.last_view,
        }
    }

    /// The trajectory's final answer as the grounding evaluation reads it ([`eval_answer`]).
    pub fn raw_answer(&self, trajectory: &Trajectory, full: &View) -> RawAnswer {
        let shown = self.shown(trajectory, full);
        eval_answer(trajectory.final_text(), shown, full, self.model_frame)
    }

    /// The trajectory's final answer resolved as the held-out evaluation scores it: its first click
    /// (and box) in original pixels, a refusal, or why there is none.
    pub fn resolve(&self, trajectory: &Trajectory, full: &View) -> Resolved {
        let raw = self.raw_answer(trajectory, full);
        resolve(&raw, full.frames, self.model_frame, self.detect_frame)
    }

    /// Everything the final answer gives, in original pixels: every box and click of an answer
    /// about the full screenshot (a detection's list), or the one click an answer about a zoomed
    /// view maps back to. `Err` is the reason it gives no answer, as [`Resolved::Failure`] names it:
    /// a message for the user (printed, or written into a record), which no caller tells apart.
    pub fn read(&self, trajectory: &Trajectory, full: &View) -> Result<PixelAnswer, String> {
        if self.shown(trajectory, full).is_full() {
            let (prediction, frame) = read_completion(
                trajectory.final_text(),
                full.frames,
                self.model_frame,
                self.detect_frame,
            )?;
            return Ok(PixelAnswer {
                frame,
                boxes: prediction.boxes,
                clicks: prediction.clicks,
                refusal: prediction.no_objects,
            });
        }
        match self.resolve(trajectory, full) {
            Resolved::Failure(reason) => Err(reason),
            Resolved::Answer { answer, frame } => Ok(match answer {
                Answer::Refusal => PixelAnswer {
                    frame,
                    boxes: Vec::new(),
                    clicks: Vec::new(),
                    refusal: true,
                },
                Answer::Click { point, bbox } => PixelAnswer {
                    frame,
                    boxes: bbox
                        .map(|bbox| LabeledBox {
                            bbox,
                            label: String::new(),
                        })
                        .into_iter()
                        .collect(),
                    clicks: vec![point],
                    refusal: false,
                },
            }),
        }
    }
}

impl Inference {
    /// The record of `sample`'s answer `trajectory` to `prompt`, as a held-out evaluation writes it
    /// (`eval/<label>.jsonl`): the answer resolved in original pixels ([`Self::resolve`]), the
    /// targets in original pixels and their size, the image path made absolute against `base` (the
    /// sample file's folder) so that a report finds it from any folder. `correct`, `reward`,
    /// `confidence` and the tool counts are left for the caller's scoring to set (false, 0, none, 0).
    pub fn eval_record(
        &self,
        sample: &Sample,
        base: &Path,
        prompt: &Prompt,
        trajectory: &Trajectory,
    ) -> EvalRecord {
        let frames = prompt.view.frames;
        let (point, pred_box) = match self.resolve(trajectory, &prompt.view) {
            Resolved::Answer {
                answer: Answer::Click { point, bbox },
                ..
            } => (Some([point.x, point.y]), bbox.map(|b| b.xyxy())),
            _ => (None, None),
        };
        let targets = pixel_boxes(sample, frames);
        let base = std::fs::canonicalize(base).unwrap_or_else(|_| base.to_path_buf());
        EvalRecord {
            id: sample.id.clone(),
            source: sample.source.clone(),
            image: sample
                .images
                .first()
                .map(|i| base.join(&i.path).display().to_string())
                .unwrap_or_default(),
            width: frames.original.width as u32,
            height: frames.original.height as u32,
            instruction: sample.instruction.clone(),
            target_size: target_size(&targets, frames.original.width, frames.original.height),
            targets,
            completion: trajectory.final_text().to_string(),
            point,
            pred_box,
            correct: false,
            reward: 0.0,
            confidence: None,
            tool_calls: 0,
            tool_calls_ok: 0,
            sampled: None,
        }
    }
}

/// The bounding boxes of the sample's targets in original pixels.
pub fn pixel_boxes(sample: &Sample, frames: ImageFrames) -> Vec<[f64; 4]> {
    sample
        .targets
        .iter()
        .map(|t| {
            frames
                .convert_box(t.shape.bounding_box(), sample.frame, Frame::Pixel)
                .xyxy()
        })
        .collect()
}

/// One turn of at most `max_new_tokens`: plain generation.
fn one_turn(max_new_tokens: usize) -> TurnLimits {
    TurnLimits {
        max_turns: 1,
        max_total_tokens: max_new_tokens,
    }
}

/// An answer in original pixels ([`Inference::read`]).
#[derive(Clone, Debug, PartialEq)]
pub struct PixelAnswer {
    /// The frame its numbers were read in (`None` for a refusal).
    pub frame: Option<Frame>,
    /// Boxes in listing order, with their labels (`""` when unlabeled).
    pub boxes: Vec<LabeledBox>,
    /// Click points in listing order: points as given, boxes by their centre.
    pub clicks: Vec<Point>,
    /// The model answered "None" (no such object).
    pub refusal: bool,
}

/// A sample's prompt as the model sees it, with what its tools work on.
#[derive(Debug)]
pub struct Prompt {
    pub encoded: Encoded,
    /// The prompt's (first) image, original size: what a zoom crops.
    pub image: RgbImage,
    /// That image as the prompt shows it.
    pub view: View,
    /// Its images' features from a frozen vision tower when they were computed for a GRPO step
    /// ([`compute_features`]): the rollout's prefill and the update both place these instead of
    /// running the tower twice. `None`: each runs the tower itself.
    pub features: Option<Tensor>,
}

/// Computes the [`Prompt::features`] of `prompts` under `model` when its vision tower is frozen: one
/// tower call over all their images, in order, as the rollout's prefill makes it (a call per image
/// launches the tower's kernels once per image and waits on each image's host values), split into
/// each prompt's rows (merged image tokens). A trained tower leaves them `None`.
pub fn compute_features(prompts: &mut [&mut Prompt], model: &dyn Model) -> Result<(), ModelError> {
    if model.vision_trainable() {
        return Ok(());
    }
    let with_images: Vec<&mut &mut Prompt> = prompts
        .iter_mut()
        .filter(|p| p.encoded.pixel_values.is_some())
        .collect();
    let pixels: Vec<&Tensor> = with_images
        .iter()
        .filter_map(|p| p.encoded.pixel_values.as_ref())
        .collect();
    if pixels.is_empty() {
        return Ok(());
    }
    let grids: Vec<Grid> = with_images
        .iter()
        .flat_map(|p| p.encoded.image_grids.clone())
        .collect();
    // Each prompt's pixels go to the device as they are and are joined there: joining a step's
    // screenshots on the host first took tens of milliseconds while the GPU waited.
    let device = model.device();
    let on_device = (pixels.iter())
        .map(|p| p.f_to_device(device))
        .collect::<Result<Vec<_>, _>>()?;
    let features = model.image_features(&Tensor::f_cat(&on_device, 0)?, &grids)?;
    let merge = model.architecture().spatial_merge_size;
    let rows = (with_images.iter())
        .map(|p| Ok(patch_count(&p.encoded.image_grids, merge)? / (merge * merge)))
        .collect::<Result<Vec<i64>, ModelError>>()?;
    let parts = features.f_split_with_sizes(&rows, 0)?;
    for (prompt, part) in with_images.into_iter().zip(parts) {
        prompt.features = Some(part);
    }
    Ok(())
}

/// `sample`'s prompt (see [`Inference::encode`]): its images read from `base` within the
/// processor's limits, their declared sizes checked against the decoded images, and the first image's
/// original and resized sizes.
pub fn encode_prompt(
    processor: &Processor,
    sample: &Sample,
    base: &Path,
    style: &PromptStyle,
    tools: Option<&ToolPrompt>,
) -> Result<Prompt, PromptError> {
    let (encoded, images) = processor.encode_sample_with(sample, base, style, tools)?;
    check_declared_sizes(sample, &images)?;
    let frames = match (sample.images.first(), resized_size(processor, &encoded)) {
        (Some(image), Some([width, height])) => ImageFrames {
            original: Size::new(f64::from(image.width), f64::from(image.height)),
            resized: Size::new(width as f64, height as f64),
        },
        _ => return Err(no_image(sample)),
    };
    let image = images
        .into_iter()
        .next()
        .ok_or_else(|| no_image(sample))?
        .to_rgb8();
    Ok(Prompt {
        encoded,
        image,
        view: View::full(frames),
        features: None,
    })
}

/// Refuses a sample whose images' declared sizes are not the decoded images' sizes: its targets are
/// read in the declared frame, so a wrong size would silently mis-score every answer.
fn check_declared_sizes(sample: &Sample, images: &[image::DynamicImage]) -> Result<(), PromptError> {
    for (declared, decoded) in sample.images.iter().zip(images) {
        let decoded = [decoded.width(), decoded.height()];
        if [declared.width, declared.height] != decoded {
            return Err(PromptError::DeclaredSize {
                sample: sample.id.clone(),
                path: declared.path.clone(),
                declared: [declared.width, declared.height],
                decoded,
            });
        }
    }
    Ok(())
}

fn no_image(sample: &Sample) -> PromptError {
    PromptError::NoImage {
        sample: sample.id.clone(),
    }
}

/// The `[width, height]` in pixels the processor resized the prompt's first image to (its patch grid
/// times the patch size).
pub fn resized_size(processor: &Processor, encoded: &Encoded) -> Option<[u64; 2]> {
    let patch = u64::from(processor.image.patch_size);
    encoded
        .image_grids
        .first()
        .map(|g| [g[2] as u64 * patch, g[1] as u64 * patch])
}

/// Tokens of a trajectory the model generated (its tool turns left out).
pub fn generated_tokens(t: &Trajectory) -> usize {
    t.generated.iter().filter(|&&g| g).count()
}

/// Why a trajectory ended, as the commands' outputs name it: `eos`, `stop` (a stop string) or
/// `length` (the token budget).
pub fn finish_name(finish: FinishReason) -> &'static str {
    match finish {
        FinishReason::Eos => "eos",
        FinishReason::StopString => "stop",
        FinishReason::Length => "length",
    }
}

/// The model's end-of-sequence ids and the tokenizer's eos: a completion ends at any of them.
pub fn stop_ids(hf: &HfModel) -> Vec<i64> {
    let mut ids = hf.model.eos_token_ids();
    let eos = i64::from(hf.processor.tokenizer.special_ids().eos);
    if !ids.contains(&eos) {
        ids.push(eos);
    }
    ids
}

/// The final answer as the grounding evaluation reads it: the completion itself when it is about
/// the full screenshot, else its first click re-expressed about the full screenshot.
pub fn eval_answer(text: &str, shown: &View, full: &View, model_frame: Frame) -> RawAnswer {
    if shown.is_full() {
        return RawAnswer::Completion(text.to_string());
    }
    let Ok(parsed) = parse_completion(text) else {
        return RawAnswer::Completion(text.to_string());
    };
    let mapped = answer_in_full_view(&parsed, shown, full, model_frame);
    let frame = mapped.frame_hint.unwrap_or(model_frame);
    match (&mapped.answer, mapped.click_points().first()) {
        (parse::Answer::Boxes(boxes), _) if !boxes.is_empty() => RawAnswer::Box {
            xyxy: boxes[0].coords,
            frame,
        },
        (_, Some(&xy)) => RawAnswer::Point { xy, frame },
        _ => RawAnswer::Completion(text.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use groundrl_score::frame::{ImageFrames, Size};

    use super::*;
    use crate::update::fixtures::{PROMPT, ids, tiny, with_image};

    fn prompt(encoded: Encoded) -> Prompt {
        let frames = ImageFrames {
            original: Size::new(28.0, 28.0),
            resized: Size::new(28.0, 28.0),
        };
        Prompt {
            encoded,
            image: RgbImage::new(1, 1),
            view: View::full(frames),
            features: None,
        }
    }

    /// Two screenshots of different sizes and a text prompt: one tower call gives each screenshot
    /// prompt the rows of its own image (equal to the tower run on that image alone, to f32
    /// rounding), the text prompt none; a trained tower gives none.
    #[test]
    fn features_of_a_steps_prompts_are_each_prompts_own() {
        let (model, p) = tiny();
        model.set_vision_trainable(false);
        let first = with_image(&p, PROMPT, [1, 4, 4], 0.0);
        let second = with_image(&p, PROMPT, [1, 4, 8], 3.0);
        let text = Encoded {
            input_ids: ids(&p, "Where is OK?"),
            pixel_values: None,
            image_grids: Vec::new(),
        };
        let mut prompts = [prompt(first.share()), prompt(text), prompt(second.share())];
        let mut all: Vec<&mut Prompt> = prompts.iter_mut().collect();
        compute_features(&mut all, &model).unwrap();
        for (got, encoded) in [(&prompts[0], &first), (&prompts[2], &second)] {
            let alone = model
                .image_features(encoded.pixel_values.as_ref().unwrap(), &encoded.image_grids)
                .unwrap();
            let got = got.features.as_ref().unwrap();
            assert_eq!(got.size(), alone.size());
            let diff = (got - alone).abs().max().double_value(&[]);
            assert!(diff < 1e-5, "features differ by {diff}");
        }
        assert!(prompts[1].features.is_none());
        model.set_vision_trainable(true);
        let mut fresh = prompt(first.share());
        compute_features(&mut [&mut fresh], &model).unwrap();
        assert!(fresh.features.is_none());
    }
}
