//! Qwen3.5: a natively multimodal family whose decoder interleaves linear-attention layers (Gated
//! DeltaNet) with full-attention layers, three to one (`layer_types` in its config), on a vision
//! tower of Qwen3-VL's kind.
//!
//! Loaded from a folder whose `model_type` is `qwen3_5` ([`crate::family::Family::Qwen35`]); every
//! part tested against transformers 5.17 on random weights:
//! - [`gated_delta`]: the gated delta rule of the linear-attention layers, in the recurrent form that
//!   decoding steps with and the chunked form that prefill and training run (equal to each other, in
//!   outputs, states and gradients, and to transformers' reference functions);
//! - [`linear_attention`] and [`full_attention`]: the two token mixers as layers;
//! - [`text`]: the decoder over whole sequences (padding zeroed before the linear-attention layers),
//!   keeping each layer's state for a prefill, and its decoding step over the cache's keys, values
//!   and per-row states;
//! - [`model`]: the whole model, Qwen3-VL's tower without DeepStack and Qwen3-VL's M-RoPE positions
//!   over partial rotary dims (logits within 2e-6 of transformers' in f32, bit-equal in bf16);
//!   `decode.rs` its generation side (cached greedy decoding gives `generate`'s tokens);
//! - [`training`]: the training forward and backward, checkpointed or not; [`presets`] its shapes.
//!
//! - `lora.rs`: LoRA adapters on the standard targets (the linear-attention layers' own projections
//!   are not targets), merged before saving.
//!
//! - [`branched`]: branched rows (a prompt and its completions) for the shared-prefix update, each
//!   layer running the prompt once and the completions from its state.
//!
//! Not yet: the MoE variant (`qwen3_5_moe`, refused by name).

mod as_model;
pub mod branched;
pub mod config;
mod decode;
pub mod flops;
pub mod full_attention;
pub mod gated_delta;
pub mod linear_attention;
mod lora;
pub mod model;
pub mod presets;
pub mod text;
pub mod training;

pub use as_model::text_parameter_count;
pub use config::{MODEL_TYPE, Qwen35Config};
pub use model::Qwen35;

/// What the parity tests share: reading a golden of `tests/fixtures/qwen3_5` and giving a model's
/// variables the golden's values by name.
#[cfg(test)]
mod golden {
    use std::collections::HashMap;
    use std::path::PathBuf;

    use tch::{Tensor, nn};

    /// The linear-attention layers of `scripts/goldens/qwen3_5_layers.py` (the layer's golden and
    /// the text decoder's): hidden 32, 2 key heads of 8 over 4 value heads of 8, kernel 4.
    pub fn linear_attention() -> super::linear_attention::LinearAttentionConfig {
        super::linear_attention::LinearAttentionConfig {
            hidden_size: 32,
            key_heads: 2,
            value_heads: 4,
            key_head_dim: 8,
            value_head_dim: 8,
            conv_kernel: 4,
            rms_norm_eps: 1e-6,
        }
    }

    /// The path of the fixture `file`.
    pub fn path(file: &str) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/qwen3_5")
            .join(file)
    }

    /// The tensors of the fixture `file`, by name.
    pub fn read(file: &str) -> HashMap<String, Tensor> {
        Tensor::read_safetensors(path(file))
            .unwrap()
            .into_iter()
            .collect()
    }

    /// Copies into every variable of `vs` the tensor of the same name in `named` (same shape);
    /// returns how many there were.
    pub fn assign(vs: &nn::VarStore, named: &HashMap<String, Tensor>) -> usize {
        let variables = vs.variables();
        let count = variables.len();
        tch::no_grad(|| {
            for (name, mut var) in variables {
                let stored = &named[&name];
                assert_eq!(var.size(), stored.size(), "{name}");
                var.copy_(stored);
            }
        });
        count
    }
}
