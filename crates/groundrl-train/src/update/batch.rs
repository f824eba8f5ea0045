//! The rows of an update and their micro-batches: a trajectory as a training row (its prompt and
//! response, the model's own tokens marked), rows laid out as one left-padded batch each or as
//! branches of their shared prompt (`shared_prefix.rs`), with the mask of the tokens learned from,
//! and a frozen vision tower's image features, computed once per update.

use std::collections::HashMap;
use std::collections::hash_map::Entry;

use groundrl_tensor::model::{Batch, Model};
use groundrl_tensor::model::{Grid, ImageFeatures, Sequence};
use groundrl_tensor::model_error::ModelError;
use groundrl_tensor::processor::{Encoded, Processor};
use groundrl_tensor::upload::upload;
use tch::{Device, Tensor};

use super::shared_prefix;

/// One trajectory to learn from: a prompt and everything after it.
pub struct Row<'a> {
    /// The prompt it was sampled for (its ids and pixels).
    pub prompt: &'a Encoded,
    /// Every token after the prompt. For a tool-using trajectory that is the model's turns and the
    /// tool turns between them, and its pixels and grids are the tool turns' images, in order
    /// (they follow the prompt's in the sequence). A plain completion is [`text_response`].
    pub response: &'a Encoded,
    /// Per response token: true where the model produced it (learned from), false where a tool did
    /// (the tool turn's text and image tokens: context the policy conditions on but did not choose,
    /// so they are left out of the loss and of its token counts). Empty: every token is the model's.
    pub generated: &'a [bool],
    pub advantage: f64,
    /// False for a completion masked out of the loss (overlong filtering).
    pub counts: bool,
    /// The prompt's image features from a frozen tower, when the rollouts computed them
    /// ([`Model::image_features`], the call [`FrozenFeatures`] makes): the update places them
    /// instead of running the tower again. `None`: the update computes them where it needs them.
    pub prompt_features: Option<&'a Tensor>,
}

impl Row<'_> {
    /// Whether response token `i` is the model's.
    pub(super) fn learns_from(&self, i: usize) -> bool {
        self.generated.get(i).copied().unwrap_or(true)
    }

    /// The prompt and the response as one sequence: ids, then pixels (when `with_pixels`) and grids
    /// of the prompt's images followed by the response's.
    fn sequence(&self, with_pixels: bool) -> Encoded {
        let mut sequence = self.prompt.share_pixels_if(with_pixels);
        sequence.append(&self.response.share_pixels_if(with_pixels));
        sequence
    }
}

/// The response of a completion without tool turns: its generated tokens, no image.
pub fn text_response(tokens: Vec<i64>) -> Encoded {
    Encoded {
        input_ids: tokens,
        pixel_values: None,
        image_grids: Vec::new(),
    }
}

/// The training inputs of some rows on the model's device.
pub(super) struct MicroBatch {
    pub batch: Batch,
    /// (B, L) f32: 1 at the model's response tokens of rows that count, 0 at prompts, tool turns and
    /// padding. The loss and its normalisers ([`LossScale`]) count only these tokens.
    pub mask: Tensor,
    /// The counting tokens and sequences (rows with any) of `mask`, counted on the host from the
    /// values it was made of, so that a mini-batch's loss scale ([`crate::loss::LossScale`]) needs
    /// no read from the device.
    pub totals: (i64, i64),
    /// (B,) f32.
    pub advantages: Tensor,
    /// The sequences the decoder runs, padding excluded: one per row (prompt, response and tool
    /// turns), or one per branched row (a prompt and its responses as branches), each with its
    /// tokens that count in the loss (the model's response tokens, of rows that count).
    pub sequences: Vec<Sequence>,
    /// The policy's image features of the batch's images, when its vision tower is frozen and they
    /// were computed once for the update ([`FrozenFeatures`]); `None`: the tower runs on the pixels.
    pub features: Option<Tensor>,
    /// The same from the reference model's tower, when there is one: computed the same way as the
    /// policy's, so that equal weights give equal log-probs to the last bit.
    pub reference_features: Option<Tensor>,
    /// Where the batch's images come from, in order: each row's prompt and response, or each
    /// branched row's prompt (keys of [`FrozenFeatures`]).
    pub sources: Vec<*const Encoded>,
    /// For branched rows (`shared_prefix.rs`): which tokens are scored and where their
    /// scores go in `mask`'s layout; `None` for plain rows, scored where `mask` is 1.
    pub branched: Option<Branched>,
}

/// The scored tokens of a branched micro-batch: flat (row-major) indices into the batch's (B, L) of
/// each scored token and of the token that predicts it, and the flat index into `mask`'s (R, W)
/// where its score goes.
pub(super) struct Branched {
    pub targets_at: Tensor,
    pub predictors_at: Tensor,
    pub slots: Tensor,
}

impl MicroBatch {
    /// `rows` as `batch` on `device`: `mask` is their (R, `width`) loss mask, row-major, and
    /// `sources` where the batch's images come from; image features are not computed yet, and no
    /// tokens are branched. Uploads without waiting for the device ([`upload`]).
    pub(super) fn new(
        batch: Batch,
        rows: &[Row],
        mask: &[f32],
        width: usize,
        sequences: Vec<Sequence>,
        sources: Vec<*const Encoded>,
        device: Device,
    ) -> Result<Self, ModelError> {
        let advantages: Vec<f32> = rows.iter().map(|r| r.advantage as f32).collect();
        let counting = |values: &[f32]| values.iter().filter(|&&m| m != 0.0).count() as i64;
        let sequences_counting = mask.chunks(width.max(1)).filter(|row| counting(row) > 0).count();
        Ok(Self {
            batch,
            totals: (counting(mask), sequences_counting as i64),
            mask: upload(mask, device)?.f_view([rows.len() as i64, width as i64])?,
            advantages: upload(&advantages, device)?,
            sequences,
            features: None,
            reference_features: None,
            sources,
            branched: None,
        })
    }

    /// Tokens run through the model: prompts, responses and tool turns.
    pub fn tokens(&self) -> u64 {
        self.sequences.iter().map(|s| s.tokens() as u64).sum()
    }

    /// Response tokens that count in the loss (the model's, of rows that count).
    pub fn counted(&self) -> u64 {
        self.sequences.iter().map(|s| s.scored as u64).sum()
    }

    /// Where the policy's forwards of this batch take their image features from.
    pub(super) fn policy_features(&self) -> ImageFeatures<'_> {
        given_or_tower(&self.features)
    }

    /// Where the reference model's forwards of this batch take their image features from.
    pub(super) fn reference_features(&self) -> ImageFeatures<'_> {
        given_or_tower(&self.reference_features)
    }
}

fn given_or_tower(features: &Option<Tensor>) -> ImageFeatures<'_> {
    match features {
        Some(features) => ImageFeatures::Given(features),
        None => ImageFeatures::Tower,
    }
}

/// A frozen vision tower's features of each distinct image set among an update's rows (a prompt's
/// screenshot, which its n samples share; a tool-using response's zoomed views), computed once per
/// update instead of once per row and pass: with 8 samples per prompt the tower otherwise runs 8
/// times on each screenshot. A prompt whose row brings its features ([`Row::prompt_features`], the
/// rollouts' own) is not run again. Empty when the tower is trained (its features need their graph).
pub(super) struct FrozenFeatures {
    pub(super) by_source: HashMap<*const Encoded, Tensor>,
    /// The grids of the images the tower ran on here (not those of features the rows brought).
    pub(super) grids: Vec<Grid>,
}

impl FrozenFeatures {
    pub(super) fn new(model: &dyn Model, rows: &[Row]) -> Result<Self, ModelError> {
        Self::computed_if(!model.vision_trainable(), model, rows, Brought::Taken)
    }

    /// The reference model's features, computed when the policy's were (`policy`), so that both
    /// models take their features the same way (equal weights then give equal log-probs); the
    /// features rows bring are the policy's, so the reference computes all of its own.
    pub(super) fn for_reference(
        policy: &Self,
        reference: &dyn Model,
        rows: &[Row],
    ) -> Result<Self, ModelError> {
        Self::computed_if(!policy.is_empty(), reference, rows, Brought::Ignored)
    }

    fn computed_if(
        compute: bool,
        model: &dyn Model,
        rows: &[Row],
        brought: Brought,
    ) -> Result<Self, ModelError> {
        let mut by_source = HashMap::new();
        let mut grids = Vec::new();
        if compute {
            let parts = rows
                .iter()
                .flat_map(|r| [(r.prompt, brought.of(r)), (r.response, None)]);
            for (encoded, given) in parts {
                let (Some(pixels), Entry::Vacant(slot)) =
                    (&encoded.pixel_values, by_source.entry(encoded as *const Encoded))
                else {
                    continue;
                };
                match given {
                    Some(features) => slot.insert(features.shallow_clone()),
                    None => {
                        grids.extend(&encoded.image_grids);
                        slot.insert(model.image_features(pixels, &encoded.image_grids)?)
                    }
                };
            }
        }
        Ok(Self { by_source, grids })
    }

    /// Whether it holds no features (a trained tower: the passes run it on the pixels).
    pub(super) fn is_empty(&self) -> bool {
        self.by_source.is_empty()
    }

    /// The features of a micro-batch's images in batch order ([`MicroBatch::sources`]); `None`
    /// when the tower is trained or the batch has no image.
    pub(super) fn of(&self, sources: &[*const Encoded]) -> Option<Tensor> {
        let parts: Vec<&Tensor> = sources.iter().filter_map(|e| self.by_source.get(e)).collect();
        (!parts.is_empty()).then(|| Tensor::cat(&parts, 0))
    }
}

/// Whether [`FrozenFeatures`] takes the features rows bring ([`Row::prompt_features`]).
#[derive(Clone, Copy)]
enum Brought {
    Taken,
    Ignored,
}

impl Brought {
    fn of<'a>(self, row: &Row<'a>) -> Option<&'a Tensor> {
        match self {
            Brought::Taken => row.prompt_features,
            Brought::Ignored => None,
        }
    }
}

/// The micro-batch of `rows`: their completions as branches of their shared prompts where `branch`
/// is on (`trainer.shared_prefix`) and the rows allow it ([`shared_prefix::applies`]), else one row
/// each ([`micro_batch`]). Without `with_pixels` the batch keeps its images' grids but not their
/// pixels, for passes whose image features are given ([`FrozenFeatures`]): concatenating a step's
/// screenshots on the host took tens of milliseconds while the GPU waited.
pub(super) fn training_batch(
    processor: &Processor,
    rows: &[Row],
    device: Device,
    branch: bool,
    with_pixels: bool,
) -> Result<MicroBatch, ModelError> {
    if branch && shared_prefix::applies(rows) {
        shared_prefix::micro_batch(processor, rows, device, with_pixels)
    } else {
        micro_batch(processor, rows, device, with_pixels)
    }
}

/// The rows as one left-padded batch of prompt + response, with the mask of the tokens learned
/// from: the model's response tokens of the rows that count; the images' pixels when
/// `with_pixels`. A row whose `generated` flags do not match its response is refused, naming it.
pub(super) fn micro_batch(
    processor: &Processor,
    rows: &[Row],
    device: Device,
    with_pixels: bool,
) -> Result<MicroBatch, ModelError> {
    let width = rows
        .iter()
        .map(|r| r.prompt.input_ids.len() + r.response.input_ids.len())
        .max()
        .unwrap_or(0);
    let mut mask = vec![0f32; rows.len() * width];
    let mut sequences = Vec::with_capacity(rows.len());
    let mut encoded = Vec::with_capacity(rows.len());
    check_generated_flags(rows)?;
    for (i, r) in rows.iter().enumerate() {
        let response = r.response.input_ids.len();
        let mut counted = 0;
        if r.counts {
            // Left padding puts the response at the end of the row.
            let start = (i + 1) * width - response;
            for (t, slot) in mask[start..(i + 1) * width].iter_mut().enumerate() {
                if r.learns_from(t) {
                    *slot = 1.0;
                    counted += 1;
                }
            }
        }
        sequences.push(Sequence::row(r.prompt.input_ids.len() + response, counted));
        encoded.push(r.sequence(with_pixels));
    }
    let sources = rows
        .iter()
        .flat_map(|r| [r.prompt as *const Encoded, r.response as *const Encoded])
        .collect();
    let batch = processor.batch(encoded);
    MicroBatch::new(batch, rows, &mask, width, sequences, sources, device)
}

/// Refuses a row whose `generated` flags do not match its response, naming it.
pub(super) fn check_generated_flags(rows: &[Row]) -> Result<(), ModelError> {
    for (i, r) in rows.iter().enumerate() {
        let response = r.response.input_ids.len();
        if !r.generated.is_empty() && r.generated.len() != response {
            return Err(ModelError::Input(format!(
                "row {i}: {} generated flags for {response} response tokens",
                r.generated.len()
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use tch::Kind;

    use super::*;
    use crate::loss::LossScale;
    use crate::update::fixtures::{PROMPT, floats, ids, tiny, with_image, zoom_trajectory};

    #[test]
    fn a_tool_turn_is_masked_out_and_its_image_follows_the_prompts() {
        let (_, p) = tiny();
        let t = zoom_trajectory(&p);
        let plain_prompt = with_image(&p, PROMPT, [1, 4, 4], 9.0);
        let plain = text_response(ids(&p, "(5, 6)<|im_end|>"));
        let rows = [
            t.row(1.0),
            Row {
                prompt: &plain_prompt,
                response: &plain,
                generated: &[],
                advantage: -1.0,
                counts: true,
                prompt_features: None,
            },
        ];
        let mb = micro_batch(&p, &rows, Device::Cpu, true).unwrap();
        let lengths = [
            t.prompt.input_ids.len() + t.response.input_ids.len(),
            plain_prompt.input_ids.len() + plain.input_ids.len(),
        ];
        let width = lengths[0].max(lengths[1]);
        // Row 0: 0 over its padding, prompt and tool turn; 1 over the call and the answer.
        let mut want = vec![0f32; width - t.generated.len()];
        want.extend(t.generated.iter().map(|&g| f32::from(u8::from(g))));
        assert_eq!(floats(&mb.mask.get(0)), want);
        let tool_start = width - t.generated.len() + t.generated.iter().position(|&g| !g).unwrap();
        let tool_len = t.tool.input_ids.len();
        assert_eq!(
            mb.batch.input_ids[0][tool_start..tool_start + tool_len],
            t.tool.input_ids[..]
        );
        assert!(want[tool_start..tool_start + tool_len].iter().all(|&m| m == 0.0));
        assert!(want[tool_start - 1] == 1.0 && want[tool_start + tool_len] == 1.0);
        // Row 1, without a tool turn: its whole response.
        let mut want = vec![0f32; width - plain.input_ids.len()];
        want.extend(vec![1f32; plain.input_ids.len()]);
        assert_eq!(floats(&mb.mask.get(1)), want);
        let learned = t.generated.iter().filter(|&&g| g).count() + plain.input_ids.len();
        assert_eq!(mb.counted(), learned as u64);
        assert_eq!(mb.totals, (learned as i64, 2));
        assert_eq!(mb.totals, LossScale::totals([&mb.mask]).unwrap());
        assert_eq!(mb.tokens(), (lengths[0] + lengths[1]) as u64);
        // Images in sequence order: row 0's screenshot and zoom, then row 1's screenshot.
        let pixels = mb.batch.pixel_values.as_ref().unwrap();
        assert_eq!(pixels.size(), [16 + 32 + 16, 1176]);
        let want = Tensor::cat(
            &[
                t.prompt.pixel_values.as_ref().unwrap(),
                t.tool.pixel_values.as_ref().unwrap(),
                plain_prompt.pixel_values.as_ref().unwrap(),
            ],
            0,
        );
        assert!(pixels.equal(&want));
        assert_eq!(mb.batch.image_grids, [[1, 4, 4], [1, 4, 8], [1, 4, 4]]);
    }

    #[test]
    fn rows_that_do_not_count_or_do_not_fit_their_flags() {
        let (_, p) = tiny();
        let t = zoom_trajectory(&p);
        let skipped = Row {
            counts: false,
            ..t.row(1.0)
        };
        let mb = micro_batch(&p, &[skipped], Device::Cpu, true).unwrap();
        assert_eq!(mb.counted(), 0);
        assert_eq!(mb.totals, (0, 0));
        assert_eq!(mb.mask.sum(Kind::Float).double_value(&[]), 0.0);
        let short = Row {
            generated: &t.generated[1..],
            ..t.row(1.0)
        };
        let err = micro_batch(&p, &[t.row(1.0), short], Device::Cpu, true)
            .err()
            .unwrap()
            .to_string();
        let n = t.response.input_ids.len();
        assert!(
            err.ends_with(&format!(
                "row 1: {} generated flags for {n} response tokens",
                n - 1
            )),
            "{err}"
        );
    }

    /// Two rows of one zooming trajectory and one of a plain prompt: a frozen tower runs once per
    /// distinct prompt and response, and the features it gives place exactly what the tower gives
    /// when run on the batch's pixels. A trained tower gets no cache.
    #[test]
    fn frozen_features_are_computed_once_per_image_set_and_equal_the_towers() {
        let (model, p) = tiny();
        model.set_vision_trainable(false);
        let t = zoom_trajectory(&p);
        let plain = with_image(&p, PROMPT, [1, 4, 8], 2.0);
        let answer = text_response(ids(&p, "(1, 2)<|im_end|>"));
        let other = Row {
            prompt: &plain,
            response: &answer,
            generated: &[],
            advantage: 1.0,
            counts: true,
            prompt_features: None,
        };
        let rows = [t.row(1.0), t.row(-1.0), other];
        let frozen = FrozenFeatures::new(&model, &rows).unwrap();
        // The trajectory's prompt and response, the plain prompt; the text answer has no image.
        assert_eq!(frozen.by_source.len(), 3);
        let mb = micro_batch(&p, &rows, Device::Cpu, true).unwrap();
        let tower = tch::no_grad(|| model.hidden_states(&mb.batch)).unwrap();
        // The batch for given features leaves the pixels out and keeps the grids.
        let mut bare = micro_batch(&p, &rows, Device::Cpu, false).unwrap();
        assert!(bare.batch.pixel_values.is_none());
        assert_eq!(bare.batch.image_grids, mb.batch.image_grids);
        let err = model.hidden_states(&bare.batch).unwrap_err().to_string();
        assert!(err.contains("no pixel values for the vision tower"), "{err}");
        bare.features = frozen.of(&bare.sources);
        let given = tch::no_grad(|| model.hidden_states_from(&bare.batch, bare.policy_features())).unwrap();
        // Up to f32 rounding: the tower batches the images' windows differently when run per image.
        let diff = (tower - given).abs().max().double_value(&[]);
        assert!(diff < 1e-5, "hidden states differ by {diff}");
        model.set_vision_trainable(true);
        assert!(FrozenFeatures::new(&model, &rows).unwrap().by_source.is_empty());
    }

    /// A row that brings its prompt's features (the rollouts' own) has them placed as they are, and
    /// the tower runs only on the other images; the reference model computes all of its own.
    #[test]
    fn features_a_row_brings_are_taken_for_the_policy_only() {
        let (model, p) = tiny();
        model.set_vision_trainable(false);
        let t = zoom_trajectory(&p);
        let brought = Tensor::ones([4, 64], (tch::Kind::Float, Device::Cpu));
        let rows = [Row {
            prompt_features: Some(&brought),
            ..t.row(1.0)
        }];
        let frozen = FrozenFeatures::new(&model, &rows).unwrap();
        let key = t.row(1.0).prompt as *const Encoded;
        assert!(frozen.by_source[&key].equal(&brought));
        // Only the zoomed view (the response's image) ran through the tower.
        assert_eq!(frozen.grids, t.tool.image_grids);
        let reference = FrozenFeatures::for_reference(&frozen, &model, &rows).unwrap();
        assert!(!reference.by_source[&key].equal(&brought));
        assert_eq!(reference.grids.len(), 2);
    }
}
