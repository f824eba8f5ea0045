//! Qwen3.5: a natively multimodal family whose decoder interleaves linear-attention layers (Gated
//! DeltaNet) with full-attention layers, three to one (`layer_types` in its config), on a vision
//! tower of Qwen3-VL's kind.
//!
//! The family is not loadable yet ([`crate::family::Family`] does not list it). What it has:
//! [`gated_delta`], the gated delta rule of its linear-attention layers in the recurrent form that
//! decoding steps with and the chunked form that prefill and training run, equal to each other and
//! to transformers 5.17's reference functions; [`linear_attention`], the whole linear-attention layer
//! over whole sequences, and [`full_attention`], the gated full-attention layer, each equal to
//! transformers' (tests); [`text`], the text decoder over whole sequences at text positions, equal to
//! transformers' `Qwen3_5TextModel` (test), with its `text_config` read by [`config`]. Not yet: the vision tower, multimodal positions, padding
//! in the decoder, decoding with a cache, loading and saving a folder.

pub mod config;
pub mod full_attention;
pub mod gated_delta;
pub mod linear_attention;
pub mod text;
