//! Qwen3-VL's side of generation ([`Decoder`]): the prefill that writes the prompts' keys and values
//! into the KV cache, DeepStack's features added after the first layers as in the full forward, and
//! the decoding step over the decoder layers' fused weights ([`FusedLayer`]), queries and keys normed
//! per head before the rotation.
//!
//! A decoded token is text, so DeepStack adds nothing at decoding, and its three M-RoPE position
//! components are equal, so that the interleaving of frequencies does not matter: the step's rotary
//! tables come from one position per row ([`Rotary::of_tokens`]).

use tch::{Device, Kind, Tensor};

use super::Qwen3Vl;
use crate::decoder::{FusedDecoder, FusedLayer, Rotary, attend};
use crate::model::{Batch, CacheLayout, DecodeStep, Decoder, Fused, ImageFeatures, Prefill, VisionIds};
use crate::model_error::ModelError;
use crate::rollout::kv_cache::KvCache;

impl Decoder for Qwen3Vl {
    fn device(&self) -> Device {
        Qwen3Vl::device(self)
    }

    fn kind(&self) -> Kind {
        Qwen3Vl::kind(self)
    }

    fn vocab_size(&self) -> i64 {
        self.config.text.vocab_size
    }

    fn cache_layout(&self) -> CacheLayout {
        let text = &self.config.text;
        CacheLayout {
            layers: self.text.layers.len(),
            kv_heads: text.num_key_value_heads,
            head_dim: text.head_dim,
        }
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
        Qwen3Vl::lora_variables(self)
    }

    fn fuse(&self) -> Result<Fused, ModelError> {
        let config = &self.text.config;
        Ok(Fused::new(FusedDecoder {
            layers: self.text.fuse_layers()?,
            inv_freq: Rotary::frequencies(config.head_dim, config.rope_theta, self.device()),
        }))
    }

    fn refresh_fused(&self, fused: &mut Fused) -> Result<(), ModelError> {
        self.text
            .refresh_fused(&mut fused.get_mut::<FusedDecoder>()?.layers)
    }

    fn prefill(
        &self,
        batch: &Batch,
        source: ImageFeatures,
        cache: &mut KvCache,
        expand: &Tensor,
    ) -> Result<Prefill, ModelError> {
        let p = self.prepare_from(batch, source)?;
        let mut x = p.embeds.shallow_clone();
        for (i, layer) in self.text.layers.iter().enumerate() {
            let (q, k, v) = layer.project_qkv(&x, &p.rotary);
            let attn = attend(&q, &k, &v, &p.mask);
            cache.write(i, 0, &k.index_select(0, expand), &v.index_select(0, expand));
            x = layer.finish(&x, &attn)?;
            if let Some(deepstack) = &p.deepstack {
                x = deepstack.add(i, x)?;
            }
        }
        let last = x.select(1, x.size()[1] - 1);
        let logits = self.text.logits(&self.text.final_norm(&last));
        Ok(Prefill {
            logits: logits.index_select(0, expand),
            rope: p.rope,
        })
    }

    fn stepper<'a>(&'a self, fused: &'a Fused) -> Result<Box<dyn DecodeStep + 'a>, ModelError> {
        let fused = fused.get::<FusedDecoder>()?;
        Ok(Box::new(Step {
            model: self,
            layers: &fused.layers,
            inv_freq: &fused.inv_freq,
        }))
    }
}

/// Qwen3-VL's decoding step over its fused layers.
struct Step<'a> {
    model: &'a Qwen3Vl,
    layers: &'a [FusedLayer],
    /// The rotary frequencies ([`Rotary::frequencies`]), kept with the fused layers.
    inv_freq: &'a Tensor,
}

impl DecodeStep for Step<'_> {
    fn step(&self, cache: &mut KvCache, token: &Tensor, column: &Tensor, position: &Tensor, logits: &Tensor) {
        let text = &self.model.text;
        let mut x = text.embed(token);
        let rotary = Rotary::of_tokens(position, self.inv_freq, x.kind());
        let mask = cache.step_mask(column);
        let mut normed = text.decode_norm(0).forward(&x);
        for (i, (layer, fused)) in text.layers.iter().zip(self.layers).enumerate() {
            let qkv = layer.decode_qkv(&normed, fused);
            let attn = cache.attend_step(i, column, &qkv, &rotary, &mask);
            (x, normed) = layer.decode_finish(x, &attn, fused, text.decode_norm(i + 1));
        }
        text.logits_into(&normed, logits);
    }
}
