//! Qwen3.5's side of generation ([`Decoder`]): a prefill that runs the prompts once, writes the
//! full-attention layers' keys and values into the KV cache and the linear-attention layers' final
//! states (convolution inputs, delta-rule states) into the cache's per-row states, each prompt's
//! copied to all its samples; and the decoding step, whose linear-attention layers take one step of
//! the recurrent rule from those states and write them back in place.
//!
//! The step reads the model's own weights (no fused copies): [`Fused`] holds nothing for this family.
//! A decoded token is text, so its three M-RoPE components are equal and the rotation is by one
//! position per row ([`TextModel::token_rotary`]).

use tch::{Device, Kind, Tensor};

use super::Qwen35;
use super::text::{LayerType, TextModel};
use crate::model::{
    Batch, CacheLayout, DecodeStep, Decoder, Fused, ImageFeatures, Prefill, StateShape, VisionIds,
};
use crate::model_error::ModelError;
use crate::rollout::kv_cache::KvCache;

impl Decoder for Qwen35 {
    fn device(&self) -> Device {
        Qwen35::device(self)
    }

    fn kind(&self) -> Kind {
        Qwen35::kind(self)
    }

    fn vocab_size(&self) -> i64 {
        self.config.text.vocab_size
    }

    fn cache_layout(&self) -> CacheLayout {
        let a = &self.config.text.attention;
        CacheLayout {
            layers: self.config.text.layers_of(LayerType::FullAttention),
            kv_heads: a.kv_heads,
            head_dim: a.head_dim,
        }
    }

    fn recurrent_states(&self) -> Vec<StateShape> {
        self.config.text.recurrent_states(self.kind())
    }

    fn vision_ids(&self) -> VisionIds {
        let c = &self.config;
        VisionIds {
            image: c.image_token_id,
            video: c.video_token_id,
            start: c.vision_start_token_id,
            end: c.vision_end_token_id,
        }
    }

    fn embedding(&self) -> &Tensor {
        self.text.embedding()
    }

    fn lora_variables(&self) -> Vec<(String, Tensor)> {
        Qwen35::lora_variables(self)
    }

    fn fuse(&self) -> Result<Fused, ModelError> {
        Ok(Fused::new(()))
    }

    fn refresh_fused(&self, _fused: &mut Fused) -> Result<(), ModelError> {
        Ok(())
    }

    fn prefill(
        &self,
        batch: &Batch,
        source: ImageFeatures,
        cache: &mut KvCache,
        expand: &Tensor,
    ) -> Result<Prefill, ModelError> {
        let p = self.prepare_from(batch, source)?;
        let (hidden, states) = self.text.forward_keeping(&p.embeds, &p.inputs())?;
        self.text.write_states(&states, cache, expand)?;
        let last = hidden.f_select(1, hidden.size()[1] - 1)?;
        Ok(Prefill {
            logits: self.head_logits(&last).f_index_select(0, expand)?,
            rope: p.rope,
        })
    }

    fn stepper<'a>(&'a self, _fused: &'a Fused) -> Result<Box<dyn DecodeStep + 'a>, ModelError> {
        Ok(Box::new(Step { model: self }))
    }
}

/// Qwen3.5's decoding step.
struct Step<'a> {
    model: &'a Qwen35,
}

impl DecodeStep for Step<'_> {
    fn step(&self, cache: &mut KvCache, token: &Tensor, column: &Tensor, position: &Tensor, logits: &Tensor) {
        let text: &TextModel = &self.model.text;
        let mut run = || -> Result<(), ModelError> {
            let x = text.embed(&token.f_unsqueeze(1)?)?;
            let rotary = text.token_rotary(position, x.kind())?;
            let mask = cache.step_mask(column);
            let hidden = text.decode_step(x, &rotary, cache, column, &mask)?;
            self.model.head_logits_into(&hidden.f_squeeze_dim(1)?, logits);
            Ok(())
        };
        // The trait's step has no error path: the shapes were all checked by the prefill.
        run().unwrap_or_else(|e| panic!("Qwen3.5 decoding step: {e}"))
    }
}
