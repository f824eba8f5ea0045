//! Qwen3.5: a natively multimodal family whose decoder interleaves linear-attention layers (Gated
//! DeltaNet) with full-attention layers, three to one (`layer_types` in its config), on a vision
//! tower of Qwen3-VL's kind.
//!
//! The family is not loadable yet ([`crate::family::Family`] does not list it). What it has, each
//! part tested against transformers 5.17 on random weights in f32:
//! - [`gated_delta`]: the gated delta rule of the linear-attention layers, in the recurrent form that
//!   decoding steps with and the chunked form that prefill and training run (equal to each other, in
//!   outputs, states and gradients, and to transformers' reference functions);
//! - [`linear_attention`] and [`full_attention`]: the two token mixers as layers;
//! - [`text`]: the text decoder at text positions, over whole sequences or continuing from the state
//!   a previous call left (convolution inputs, delta-rule states, keys and values), with its
//!   `text_config` read by [`config`].
//!
//! Not yet: the vision tower, multimodal positions, padding inside the decoder, the rollout engine's
//! caches and graphs, training, loading and saving a folder, the MoE variant.

pub mod config;
pub mod full_attention;
pub mod gated_delta;
pub mod linear_attention;
pub mod text;

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
