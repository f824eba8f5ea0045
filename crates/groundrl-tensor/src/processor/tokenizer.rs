//! Qwen2.5-VL's tokenizer: a checkpoint's tokenizer.json run by the `tokenizers` crate, as HF
//! transformers runs it, plus the special ids the model needs and the image-pad expansion of HF's
//! Qwen2.5-VL processor.
//!
//! HF 5.x builds `Qwen2Tokenizer` from tokenizer.json's vocabulary and merges with a fixed Qwen2
//! pipeline, taking the added tokens from tokenizer_config.json; for Qwen checkpoints that is the
//! pipeline tokenizer.json itself declares, so running tokenizer.json directly gives the same ids
//! (checked against HF by the chat goldens).

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::special_ids::SpecialIds;

pub const TOKENIZER_FILE: &str = "tokenizer.json";
pub const TOKENIZER_CONFIG_FILE: &str = "tokenizer_config.json";

pub const ENDOFTEXT: &str = "<|endoftext|>";
pub const IM_START: &str = "<|im_start|>";
pub const IM_END: &str = "<|im_end|>";
pub const VISION_START: &str = "<|vision_start|>";
pub const VISION_END: &str = "<|vision_end|>";
pub const IMAGE_PAD: &str = "<|image_pad|>";
pub const VIDEO_PAD: &str = "<|video_pad|>";

#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("cannot write {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
    #[error("{path} is not a valid {what}: {message}")]
    Parse {
        path: PathBuf,
        what: &'static str,
        message: String,
    },
    #[error("the tokenizer has no token {0:?}")]
    UnknownToken(String),
    #[error("cannot encode {text:?}: {message}")]
    Encode { text: String, message: String },
    #[error("cannot decode {ids:?}: {message}")]
    Decode { ids: Vec<u32>, message: String },
    #[error("cannot build the tokenizer: {0}")]
    Build(String),
    #[error("the text has {placeholders} {token} placeholders but {counts} counts were given (one per item)")]
    PlaceholderCount {
        token: String,
        placeholders: usize,
        counts: usize,
    },
}

/// tokenizer_config.json as read: kept whole, because templates see its special tokens and HF
/// tells an absent entry (class default) from a null one (no such token).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TokenizerConfig(pub Map<String, Value>);

/// The special-token names HF passes to chat templates (its `special_tokens_map`).
const NAMED_SPECIAL_TOKENS: [&str; 4] = ["bos_token", "eos_token", "unk_token", "pad_token"];

impl TokenizerConfig {
    /// Reads `dir/tokenizer_config.json`; an absent file is an empty config (all class defaults).
    pub fn read(dir: &Path) -> Result<Self, TokenizerError> {
        let path = dir.join(TOKENIZER_CONFIG_FILE);
        if !path.exists() {
            return Ok(Self::default());
        }
        let text = read_text(&path)?;
        let parse_error = |message: String| TokenizerError::Parse {
            path: path.clone(),
            what: "tokenizer config",
            message,
        };
        match serde_json::from_str(&text).map_err(|e| parse_error(e.to_string()))? {
            Value::Object(map) => Ok(Self(map)),
            _ => Err(parse_error("not a JSON object".into())),
        }
    }

    /// A named special token (`eos_token`, ...): a string or an AddedToken object in the file;
    /// when absent, `Qwen2Tokenizer`'s default (`<|endoftext|>`, none for `bos_token`).
    pub fn special_token(&self, name: &str) -> Option<String> {
        match self.0.get(name) {
            None if name == "bos_token" => None,
            None => Some(ENDOFTEXT.to_owned()),
            Some(Value::String(token)) => Some(token.clone()),
            Some(Value::Object(token)) => token.get("content").and_then(Value::as_str).map(str::to_owned),
            Some(_) => None,
        }
    }

    /// The named special tokens that are set, as HF gives them to chat templates.
    pub fn special_tokens_map(&self) -> Vec<(&'static str, String)> {
        let named = NAMED_SPECIAL_TOKENS.iter();
        named
            .filter_map(|&name| Some((name, self.special_token(name)?)))
            .collect()
    }
}

/// A checkpoint's tokenizer with the Qwen2.5-VL special ids resolved.
#[derive(Clone, Debug)]
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    config: TokenizerConfig,
    special: SpecialIds,
}

impl Tokenizer {
    /// Loads `dir/tokenizer.json` and `dir/tokenizer_config.json` (optional). Fails, naming the
    /// file, when one is unreadable, and when a Qwen2.5-VL special token is missing.
    pub fn from_folder(dir: &Path) -> Result<Self, TokenizerError> {
        let path = dir.join(TOKENIZER_FILE);
        let text = read_text(&path)?;
        let inner: tokenizers::Tokenizer =
            text.parse()
                .map_err(|e: tokenizers::Error| TokenizerError::Parse {
                    path: path.clone(),
                    what: "tokenizer",
                    message: e.to_string(),
                })?;
        Self::new(inner, TokenizerConfig::read(dir)?)
    }

    /// Wraps a tokenizer already in memory (e.g. the tiny one) with its config.
    pub fn new(inner: tokenizers::Tokenizer, config: TokenizerConfig) -> Result<Self, TokenizerError> {
        let named = |name: &str| {
            let token = config
                .special_token(name)
                .ok_or_else(|| TokenizerError::UnknownToken(name.into()))?;
            id_of(&inner, &token)
        };
        let special = SpecialIds {
            endoftext: id_of(&inner, ENDOFTEXT)?,
            im_start: id_of(&inner, IM_START)?,
            im_end: id_of(&inner, IM_END)?,
            vision_start: id_of(&inner, VISION_START)?,
            vision_end: id_of(&inner, VISION_END)?,
            image_pad: id_of(&inner, IMAGE_PAD)?,
            video_pad: id_of(&inner, VIDEO_PAD)?,
            eos: named("eos_token")?,
            pad: named("pad_token")?,
        };
        Ok(Self {
            inner,
            config,
            special,
        })
    }

    /// Token ids of `text`, special tokens written in it recognised as such and nothing added
    /// around it (Qwen adds no BOS), as HF's `apply_chat_template(tokenize=True)` encodes.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, TokenizerError> {
        let encoding = self
            .inner
            .encode_fast(text, false)
            .map_err(|e| TokenizerError::Encode {
                text: text.to_owned(),
                message: e.to_string(),
            })?;
        Ok(encoding.get_ids().to_vec())
    }

    /// The text of `ids`; with `skip_special_tokens`, tokens marked special are left out (like
    /// HF, Qwen's `<tool_call>` and FIM tokens are not special and stay).
    pub fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> Result<String, TokenizerError> {
        self.inner
            .decode(ids, skip_special_tokens)
            .map_err(|e| TokenizerError::Decode {
                ids: ids.to_vec(),
                message: e.to_string(),
            })
    }

    /// The id of a token by its text (e.g. `<|box_start|>`).
    pub fn token_id(&self, token: &str) -> Result<u32, TokenizerError> {
        id_of(&self.inner, token)
    }

    pub fn special_ids(&self) -> SpecialIds {
        self.special
    }

    /// Every token, added ones included (HF's `len(tokenizer)`, not its `vocab_size`). The model's
    /// embedding may have more rows (Qwen pads it to 151 936).
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    pub fn config(&self) -> &TokenizerConfig {
        &self.config
    }
}

fn id_of(tokenizer: &tokenizers::Tokenizer, token: &str) -> Result<u32, TokenizerError> {
    tokenizer
        .token_to_id(token)
        .ok_or_else(|| TokenizerError::UnknownToken(token.to_owned()))
}

pub(crate) fn read_text(path: &Path) -> Result<String, TokenizerError> {
    std::fs::read_to_string(path).map_err(|source| TokenizerError::Read {
        path: path.into(),
        source,
    })
}

/// Replaces the i-th `<|image_pad|>` of a rendered chat by `counts[i]` copies, as HF's
/// Qwen2.5-VL processor does (there `counts[i]` is the image's `grid_t * grid_h * grid_w /
/// merge_size²`). Any other number of counts is an error here, where HF 5.17 raises a bare
/// `StopIteration` when images run out, silently drops extra images and leaves the placeholders
/// alone when given no image at all: each of those would misalign image features and text.
pub fn expand_image_pads(text: &str, counts: &[usize]) -> Result<String, TokenizerError> {
    expand_placeholders(text, IMAGE_PAD, counts)
}

/// [`expand_image_pads`] for videos and `<|video_pad|>`.
pub fn expand_video_pads(text: &str, counts: &[usize]) -> Result<String, TokenizerError> {
    expand_placeholders(text, VIDEO_PAD, counts)
}

fn expand_placeholders(text: &str, placeholder: &str, counts: &[usize]) -> Result<String, TokenizerError> {
    let pieces: Vec<&str> = text.split(placeholder).collect();
    let placeholders = pieces.len() - 1;
    if placeholders != counts.len() {
        let token = placeholder.to_owned();
        return Err(TokenizerError::PlaceholderCount {
            token,
            placeholders,
            counts: counts.len(),
        });
    }
    let mut expanded = String::from(pieces[0]);
    for (piece, &count) in pieces[1..].iter().zip(counts) {
        expanded.push_str(&placeholder.repeat(count));
        expanded.push_str(piece);
    }
    Ok(expanded)
}
