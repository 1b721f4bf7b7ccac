//! [`TokenStream`]: incremental detokenization for printing tokens as they are generated.

use super::codec::Tokenizer;
use super::error::TokenizerError;

/// Turns token ids, pushed one at a time, into text chunks that only ever contain complete
/// characters: a character whose UTF-8 bytes are split across tokens is emitted once its last
/// byte arrives.
///
/// It decodes a small window of recent tokens and emits what the window's text gained, minus
/// any trailing U+FFFD (the mark of an incomplete character), so the concatenation of all chunks
/// plus [`finish`](Self::finish) equals `decode` of all the ids.
#[derive(Debug)]
pub struct TokenStream<'a> {
    tokenizer: &'a Tokenizer,
    skip_special: bool,
    /// Ids of the current window.
    window: Vec<u32>,
    /// The part of the window's text already emitted.
    emitted: String,
}

impl<'a> TokenStream<'a> {
    /// A stream over `tokenizer`; special tokens are left out of the text when `skip_special`.
    pub fn new(tokenizer: &'a Tokenizer, skip_special: bool) -> Self {
        Self { tokenizer, skip_special, window: Vec::new(), emitted: String::new() }
    }

    /// Adds one token; returns the newly completed text (possibly empty).
    pub fn push(&mut self, id: u32) -> Result<String, TokenizerError> {
        self.window.push(id);
        let text = self.tokenizer.decode_with(&self.window, self.skip_special)?;
        let complete = text.trim_end_matches('\u{FFFD}');
        let Some(new) = complete.strip_prefix(self.emitted.as_str()) else {
            // The decoder rewrote earlier text (not the case for byte-level BPE): wait.
            return Ok(String::new());
        };
        let new = new.to_string();
        if complete.len() == text.len() {
            // Everything decoded is complete: restart the window at the last token, whose text
            // (decoded alone) counts as emitted, so context-sensitive decoders (a SentencePiece
            // leading space) still see it; or empty if that token alone is not valid text.
            let alone = self.tokenizer.decode_with(&[id], self.skip_special)?;
            self.window.clear();
            self.emitted.clear();
            if !alone.contains('\u{FFFD}') {
                self.window.push(id);
                self.emitted = alone;
            }
        } else {
            self.emitted.push_str(&new);
        }
        Ok(new)
    }

    /// Ends the stream: returns any text still held back (an incomplete character comes out as
    /// U+FFFD) and empties the window.
    pub fn finish(&mut self) -> Result<String, TokenizerError> {
        let text = self.tokenizer.decode_with(&self.window, self.skip_special)?;
        let rest = text.strip_prefix(self.emitted.as_str()).unwrap_or("").to_string();
        self.window.clear();
        self.emitted.clear();
        Ok(rest)
    }
}
