//! The tokenizer of the built-in `tiny` model preset: a small Qwen2-style byte-level BPE.
//!
//! Real checkpoints bring their own tokenizer (151 665 tokens); tests and the tiny preset need one
//! that is small enough to commit and to embed in a toy model, yet runs the exact Qwen2 pipeline
//! (NFC, Qwen's split regex, byte-level BPE without prefix space) and knows every Qwen special
//! token, so the chat template, the image-pad expansion and HF parity are exercised for real.
//!
//! The merges are learned here, deterministically, from a small built-in corpus of grounding
//! prompts, JSON answers and the chat template's own phrases, so that typical prompts get short
//! sequences. The vocabulary is: the 256 byte tokens (ids 0..256, in GPT-2's byte order, as Qwen's
//! vocabulary starts), then the merged tokens up to [`BASE_VOCAB_SIZE`], then Qwen's added tokens
//! in Qwen's order.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde_json::{Map, Value, json};
use tokenizers::decoders::byte_level::ByteLevel;
use tokenizers::models::bpe::{BPE, Merges, Vocab};
use tokenizers::normalizers::unicode::NFC;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{
    AddedToken, OffsetReferential, OffsetType, PreTokenizedString, PreTokenizer, PreTokenizerWrapper,
    SplitDelimiterBehavior,
};

use super::chat_template::QWEN2_5_VL_TEMPLATE;
use super::tokenizer::{TOKENIZER_CONFIG_FILE, TOKENIZER_FILE, Tokenizer, TokenizerConfig, TokenizerError};

/// The regex of Qwen2's Split pre-tokenizer (letters with one leading non-letter, single digits,
/// punctuation runs with trailing newlines, whitespace runs).
pub const QWEN2_SPLIT_REGEX: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Byte tokens plus learned merges: the BPE model's own vocabulary.
pub const BASE_VOCAB_SIZE: u32 = 640;

/// Qwen2.5-VL's added tokens in Qwen's order, with whether each is special (skipped by
/// `decode(.., skip_special_tokens)`): like Qwen's, the tool-call and FIM tokens are not.
pub const ADDED_TOKENS: [(&str, bool); 22] = [
    ("<|endoftext|>", true),
    ("<|im_start|>", true),
    ("<|im_end|>", true),
    ("<|object_ref_start|>", true),
    ("<|object_ref_end|>", true),
    ("<|box_start|>", true),
    ("<|box_end|>", true),
    ("<|quad_start|>", true),
    ("<|quad_end|>", true),
    ("<|vision_start|>", true),
    ("<|vision_end|>", true),
    ("<|vision_pad|>", true),
    ("<|image_pad|>", true),
    ("<|video_pad|>", true),
    ("<tool_call>", false),
    ("</tool_call>", false),
    ("<|fim_prefix|>", false),
    ("<|fim_middle|>", false),
    ("<|fim_suffix|>", false),
    ("<|fim_pad|>", false),
    ("<|repo_name|>", false),
    ("<|file_sep|>", false),
];

/// `<|endoftext|>`: the pad token (and the end of pretraining documents).
pub const ENDOFTEXT_ID: u32 = BASE_VOCAB_SIZE;
pub const IM_START_ID: u32 = BASE_VOCAB_SIZE + 1;
/// `<|im_end|>`: the end of every chat turn, the eos of generation.
pub const IM_END_ID: u32 = BASE_VOCAB_SIZE + 2;
pub const VISION_START_ID: u32 = BASE_VOCAB_SIZE + 9;
pub const VISION_END_ID: u32 = BASE_VOCAB_SIZE + 10;
pub const IMAGE_PAD_ID: u32 = BASE_VOCAB_SIZE + 12;
pub const VIDEO_PAD_ID: u32 = BASE_VOCAB_SIZE + 13;
/// Every token, added ones included (HF's `len(tokenizer)`): the embedding rows the model needs.
pub const VOCAB_SIZE: u32 = BASE_VOCAB_SIZE + ADDED_TOKENS.len() as u32;

/// `model_max_length` written in tokenizer_config.json (the tiny preset's context).
pub const MODEL_MAX_LENGTH: u32 = 4096;

const CORPUS: &str = include_str!("../../assets/tiny_tokenizer_corpus.txt");

/// Builds the tiny tokenizer: learns the merges and assembles the Qwen2 pipeline around them.
pub fn build_tiny_tokenizer() -> Result<tokenizers::Tokenizer, TokenizerError> {
    let words = corpus_words(CORPUS)?;
    let (vocab, merges) = learn_bpe(words, BASE_VOCAB_SIZE as usize)?;
    let vocab: Vocab = vocab.into_iter().zip(0..).collect();
    // Empty affixes, as Qwen's tokenizer.json and HF's Qwen2Tokenizer declare them.
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .continuing_subword_prefix(String::new())
        .end_of_word_suffix(String::new())
        .build()
        .map_err(build_error)?;
    let mut tokenizer = tokenizers::Tokenizer::new(bpe);
    tokenizer
        .with_normalizer(Some(NFC))
        .with_pre_tokenizer(Some(qwen2_pre_tokenizer()?))
        .with_post_processor(Some(ByteLevel::new(false, false, false)))
        .with_decoder(Some(ByteLevel::new(false, false, false)));
    let added: Vec<AddedToken> = ADDED_TOKENS
        .iter()
        .map(|&(content, special)| AddedToken::from(content, special).normalized(false))
        .collect();
    tokenizer.add_tokens(&added);
    Ok(tokenizer)
}

/// Writes tokenizer.json and tokenizer_config.json of the tiny tokenizer into `dir` (created if
/// missing): a folder that both [`super::tokenizer::Tokenizer::from_folder`] and HF's
/// `AutoTokenizer.from_pretrained` load.
pub fn write_tiny_tokenizer(dir: &Path) -> Result<(), TokenizerError> {
    let tokenizer = build_tiny_tokenizer()?;
    let json = tokenizer.to_string(true).map_err(build_error)?;
    let config = serde_json::to_string_pretty(&tiny_tokenizer_config()).map_err(|e| build_error(e.into()))?;
    std::fs::create_dir_all(dir).map_err(|source| TokenizerError::Write {
        path: dir.into(),
        source,
    })?;
    write_file(&dir.join(TOKENIZER_FILE), json + "\n")?;
    write_file(&dir.join(TOKENIZER_CONFIG_FILE), config + "\n")
}

fn write_file(path: &Path, text: String) -> Result<(), TokenizerError> {
    std::fs::write(path, text).map_err(|source| TokenizerError::Write {
        path: path.into(),
        source,
    })
}

fn build_error(error: tokenizers::Error) -> TokenizerError {
    TokenizerError::Build(error.to_string())
}

/// Qwen2's pre-tokenizer: split with Qwen's regex, then map bytes to GPT-2's printable characters.
fn qwen2_pre_tokenizer() -> Result<PreTokenizerWrapper, TokenizerError> {
    let pattern = SplitPattern::Regex(QWEN2_SPLIT_REGEX.into());
    let split = Split::new(pattern, SplitDelimiterBehavior::Isolated, false).map_err(build_error)?;
    let byte_level = tokenizers::pre_tokenizers::byte_level::ByteLevel::new(false, false, false);
    Ok(Sequence::new(vec![split.into(), byte_level.into()]).into())
}

/// tokenizer_config.json as Qwen2.5-VL ships it: added tokens by id (HF 5.x rebuilds the
/// tokenizer from vocab and merges and takes the added tokens from here), eos `<|im_end|>`,
/// pad `<|endoftext|>`, no bos or unk, and the chat template.
/// The tiny tokenizer in memory, as [`write_tiny_tokenizer`] writes it (for tools that need a
/// tokenizer but no folder, e.g. benchmarks of random-init models).
pub fn tiny_tokenizer() -> Result<Tokenizer, TokenizerError> {
    let config = match tiny_tokenizer_config() {
        Value::Object(map) => TokenizerConfig(map),
        _ => {
            return Err(TokenizerError::Build(
                "the tiny tokenizer config is not an object".into(),
            ));
        }
    };
    Tokenizer::new(build_tiny_tokenizer()?, config)
}

fn tiny_tokenizer_config() -> Value {
    let mut decoder = Map::new();
    for (id, &(content, special)) in (ENDOFTEXT_ID..).zip(ADDED_TOKENS.iter()) {
        let token = json!({
            "content": content, "lstrip": false, "normalized": false, "rstrip": false,
            "single_word": false, "special": special,
        });
        decoder.insert(id.to_string(), token);
    }
    let extra: Vec<&str> = ADDED_TOKENS[1..14].iter().map(|(content, _)| *content).collect();
    json!({
        "add_prefix_space": false,
        "added_tokens_decoder": decoder,
        "additional_special_tokens": extra,
        "bos_token": null,
        "chat_template": QWEN2_5_VL_TEMPLATE,
        "clean_up_tokenization_spaces": false,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": MODEL_MAX_LENGTH,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": false,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": null,
    })
}

/// Pre-tokenizes the corpus with the Qwen2 pipeline: each distinct word (as byte-level
/// characters) with its count. A BTreeMap keeps the learning deterministic.
fn corpus_words(corpus: &str) -> Result<BTreeMap<String, u64>, TokenizerError> {
    let mut text = PreTokenizedString::from(corpus);
    qwen2_pre_tokenizer()?
        .pre_tokenize(&mut text)
        .map_err(build_error)?;
    let mut words = BTreeMap::new();
    for (word, _, _) in text.get_splits(OffsetReferential::Original, OffsetType::Byte) {
        *words.entry(word.to_owned()).or_insert(0) += 1;
    }
    Ok(words)
}

/// GPT-2's byte-to-character map in its order (printable bytes first), which is also the order of
/// the first 256 ids of Qwen's vocabulary.
fn byte_alphabet() -> Vec<char> {
    let printable = |b: u8| matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
    let mut chars: Vec<char> = (0..=255u8).filter(|&b| printable(b)).map(char::from).collect();
    let shifted = (0..=255u8).filter(|&b| !printable(b)).zip(256u32..);
    chars.extend(shifted.map(|(_, code)| char::from_u32(code).expect("256..512 are valid chars")));
    chars
}

/// Classic BPE learning: repeatedly merge the most frequent adjacent pair (ties: the smallest
/// pair) until the vocabulary holds `size` tokens. Returns the vocabulary in id order and the merges
/// in rank order.
fn learn_bpe(words: BTreeMap<String, u64>, size: usize) -> Result<(Vec<String>, Merges), TokenizerError> {
    let mut vocab: Vec<String> = byte_alphabet().into_iter().map(String::from).collect();
    let mut known: BTreeSet<String> = vocab.iter().cloned().collect();
    let mut words: Vec<(Vec<String>, u64)> = words
        .into_iter()
        .map(|(word, count)| (word.chars().map(String::from).collect(), count))
        .collect();
    let mut merges = Vec::new();
    while vocab.len() < size {
        let (pair, count) = most_frequent_pair(&words)
            .ok_or_else(|| TokenizerError::Build("the tiny tokenizer's corpus has no pair left".into()))?;
        if count < 2 {
            let message = format!("the tiny tokenizer's corpus gives only {} tokens", vocab.len());
            return Err(TokenizerError::Build(message));
        }
        for (symbols, _) in &mut words {
            merge_pair(symbols, &pair);
        }
        let merged = format!("{}{}", pair.0, pair.1);
        if known.insert(merged.clone()) {
            vocab.push(merged);
        }
        merges.push(pair);
    }
    Ok((vocab, merges))
}

fn most_frequent_pair(words: &[(Vec<String>, u64)]) -> Option<((String, String), u64)> {
    let mut counts: BTreeMap<(&str, &str), u64> = BTreeMap::new();
    for (symbols, count) in words {
        for pair in symbols.windows(2) {
            *counts.entry((&pair[0], &pair[1])).or_insert(0) += count;
        }
    }
    // max_by_key keeps the last maximum; iterating in reverse makes that the smallest pair.
    let ((a, b), count) = counts.into_iter().rev().max_by_key(|&(_, count)| count)?;
    Some(((a.to_owned(), b.to_owned()), count))
}

/// Replaces every non-overlapping occurrence of `pair`, left to right, by its concatenation.
fn merge_pair(symbols: &mut Vec<String>, pair: &(String, String)) {
    let mut merged = Vec::with_capacity(symbols.len());
    let mut i = 0;
    while i < symbols.len() {
        if i + 1 < symbols.len() && symbols[i] == pair.0 && symbols[i + 1] == pair.1 {
            merged.push(format!("{}{}", pair.0, pair.1));
            i += 2;
        } else {
            merged.push(std::mem::take(&mut symbols[i]));
            i += 1;
        }
    }
    *symbols = merged;
}
