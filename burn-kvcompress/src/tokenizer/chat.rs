//! ChatML prompt formatting, as SmolLM2's chat template renders it.

use std::fmt;

/// The system message SmolLM2's template inserts when the conversation does not start with one.
pub const SMOLLM2_DEFAULT_SYSTEM: &str = "You are a helpful AI assistant named SmolLM, trained by Hugging Face";

/// Who wrote a chat message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// Instructions to the model.
    System,
    /// The user.
    User,
    /// The model.
    Assistant,
}

impl Role {
    /// The role name used in the prompt: `system`, `user` or `assistant`.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatMessage {
    /// Who wrote it.
    pub role: Role,
    /// What it says.
    pub content: String,
}

impl ChatMessage {
    /// A message from `role`.
    pub fn new(role: Role, content: impl Into<String>) -> Self {
        Self { role, content: content.into() }
    }

    /// A system message.
    pub fn system(content: impl Into<String>) -> Self {
        Self::new(Role::System, content)
    }

    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Self::new(Role::User, content)
    }

    /// An assistant message.
    pub fn assistant(content: impl Into<String>) -> Self {
        Self::new(Role::Assistant, content)
    }
}

/// Renders `messages` the way SmolLM2's `tokenizer.chat_template` does:
/// `<|im_start|>{role}\n{content}<|im_end|>\n` per message, preceded by a system message with
/// [`SMOLLM2_DEFAULT_SYSTEM`] when the first message is not a system message, and followed by
/// `<|im_start|>assistant\n` when `add_generation_prompt`. An empty conversation renders as the
/// generation prompt alone (or nothing), as the template does.
///
/// Encode the result with `parse_special = true`.
pub fn chatml_prompt(messages: &[ChatMessage], add_generation_prompt: bool) -> String {
    let mut out = String::new();
    for (i, m) in messages.iter().enumerate() {
        if i == 0 && m.role != Role::System {
            out.push_str("<|im_start|>system\n");
            out.push_str(SMOLLM2_DEFAULT_SYSTEM);
            out.push_str("<|im_end|>\n");
        }
        out.push_str("<|im_start|>");
        out.push_str(m.role.as_str());
        out.push('\n');
        out.push_str(&m.content);
        out.push_str("<|im_end|>\n");
    }
    if add_generation_prompt {
        out.push_str("<|im_start|>assistant\n");
    }
    out
}
