//! The special token ids a model and its tokenizer must agree on. The tokenizer reads them from a
//! checkpoint ([`crate::processor::tokenizer::Tokenizer::special_ids`]) and the model's presets are
//! built around them (`qwen2_5_vl::presets`), so they belong to neither side.

/// The ids Qwen2.5-VL's model and processor look up by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpecialIds {
    pub endoftext: u32,
    pub im_start: u32,
    pub im_end: u32,
    pub vision_start: u32,
    pub vision_end: u32,
    pub image_pad: u32,
    pub video_pad: u32,
    /// tokenizer_config.json's `eos_token` (`<|im_end|>` for Qwen2.5-VL): where generation stops.
    pub eos: u32,
    /// tokenizer_config.json's `pad_token` (`<|endoftext|>` for Qwen2.5-VL).
    pub pad: u32,
}
