//! From a chat with images to model inputs, as HF's Qwen2.5-VL processor makes them.

pub mod chat_template;
pub mod image;
pub mod tiny_tokenizer;
pub mod tokenizer;
