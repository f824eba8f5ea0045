//! Host-side bookkeeping of where each row's completion ends.
//!
//! The device masks rows after a stop token or their length limit, but the host decides the result:
//! it reads the generated tokens in chunks and finds, per row, the first stop token, the first token
//! that completes a stop string, or the length limit, whichever comes first. The result therefore does
//! not depend on how often the engine syncs.

use super::FinishReason;
use crate::processor::tokenizer::{Tokenizer, TokenizerError};

/// One row's tokens so far and, once known, where and why it ended.
#[derive(Debug)]
pub struct RowEnd<'a> {
    tokens: Vec<i64>,
    limit: usize,
    stop_ids: &'a [i64],
    stop_strings: &'a [String],
    /// Tokens already searched for stop strings without a hit.
    searched: usize,
    finish: Option<FinishReason>,
}

impl<'a> RowEnd<'a> {
    pub fn new(limit: usize, stop_ids: &'a [i64], stop_strings: &'a [String]) -> Self {
        Self {
            tokens: Vec::with_capacity(limit),
            limit,
            stop_ids,
            stop_strings,
            searched: 0,
            finish: None,
        }
    }

    pub fn finish(&self) -> Option<FinishReason> {
        self.finish
    }

    /// Appends newly generated tokens (ignored once ended); true when this call ended the row.
    pub fn absorb(&mut self, new: &[i64], tokenizer: &Tokenizer) -> Result<bool, TokenizerError> {
        if self.finish.is_some() {
            return Ok(false);
        }
        for &token in new {
            self.tokens.push(token);
            if self.stop_ids.contains(&token) {
                self.finish = Some(FinishReason::Eos);
            } else if self.tokens.len() >= self.limit {
                self.finish = Some(FinishReason::Length);
            }
            if self.finish.is_some() {
                break;
            }
        }
        self.search_stop_strings(tokenizer)?;
        Ok(self.finish.is_some())
    }

    /// The tokens of the ended row and why it ended.
    pub fn into_result(self) -> (Vec<i64>, FinishReason) {
        (self.tokens, self.finish.unwrap_or(FinishReason::Length))
    }

    /// Cuts the completion after the first token whose prefix's text holds a stop string. The text is
    /// decoded whole (a token's text can depend on its neighbours in byte-level BPE); only prefixes
    /// longer than those already searched are tried.
    fn search_stop_strings(&mut self, tokenizer: &Tokenizer) -> Result<(), TokenizerError> {
        if self.stop_strings.is_empty() || !self.holds_stop_string(self.tokens.len(), tokenizer)? {
            self.searched = self.tokens.len();
            return Ok(());
        }
        for len in self.searched + 1..=self.tokens.len() {
            if self.holds_stop_string(len, tokenizer)? {
                // A stop token at the very position that completes the string keeps Eos.
                if len < self.tokens.len() || self.finish != Some(FinishReason::Eos) {
                    self.finish = Some(FinishReason::StopString);
                }
                self.tokens.truncate(len);
                break;
            }
        }
        self.searched = self.tokens.len();
        Ok(())
    }

    fn holds_stop_string(&self, len: usize, tokenizer: &Tokenizer) -> Result<bool, TokenizerError> {
        // Ids outside u32 cannot come from the model's vocabulary; skipping them only affects text.
        let ids: Vec<u32> = self.tokens[..len]
            .iter()
            .filter_map(|&t| u32::try_from(t).ok())
            .collect();
        let text = tokenizer.decode(&ids, true)?;
        Ok(self.stop_strings.iter().any(|s| text.contains(s.as_str())))
    }
}
