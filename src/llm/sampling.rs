//! Model requests answered by the MCP client, through `sampling/createMessage`.
//!
//! Owns: the client's peer once it has initialized (and whether it declared the `sampling`
//! capability), turning a [`Prompt`] into a `createMessage` request and its result into a
//! [`Completion`], and cancelling the request (`notifications/cancelled`) when the cell is
//! interrupted. rmcp marks sampling deprecated by a future protocol revision (SEP-2577); it is
//! what clients speak today, and rmcp refuses it on protocol 2026-07-28 or later (the error
//! is then the answer).

#![allow(deprecated)] // sampling: see above

use std::sync::{Arc, OnceLock};

use rmcp::model::{ClientResult, CreateMessageRequest, CreateMessageRequestParams, ServerRequest};
use rmcp::service::PeerRequestOptions;
use rmcp::{Peer, RoleServer};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::{BoxFuture, Completion, LlmError, ModelBroker, Prompt};

/// Where a client may put the answer's token counts (`{input_tokens, output_tokens}`) in the
/// result's `_meta`; the pi extension does.
pub const USAGE_META: &str = "pi-repl/usage";

/// The answer's length when the cell does not say.
pub const DEFAULT_MAX_TOKENS: u32 = 4096;

/// The MCP client as a model broker.
#[derive(Default)]
pub struct SamplingBroker {
    client: OnceLock<Client>,
}

struct Client {
    peer: Peer<RoleServer>,
    sampling: bool,
    name: String,
}

impl SamplingBroker {
    pub fn new() -> Arc<SamplingBroker> {
        Arc::new(SamplingBroker::default())
    }

    /// The client initialized: `sampling` when it declared the capability.
    pub fn connect(&self, peer: Peer<RoleServer>, sampling: bool, name: String) {
        let _ = self.client.set(Client {
            peer,
            sampling,
            name,
        });
    }
}

impl ModelBroker for SamplingBroker {
    fn available(&self) -> bool {
        self.client.get().is_some_and(|client| client.sampling)
    }

    fn describe(&self) -> String {
        match self.client.get() {
            Some(client) => format!("the MCP client {} (sampling)", client.name),
            None => "the MCP client (sampling)".to_string(),
        }
    }

    fn complete<'a>(
        &'a self,
        prompt: &'a Prompt,
        cancel: CancellationToken,
    ) -> BoxFuture<'a, Result<Completion, LlmError>> {
        Box::pin(async move {
            let Some(client) = self.client.get().filter(|client| client.sampling) else {
                return Err(LlmError::Unavailable(super::UNAVAILABLE.to_string()));
            };
            let params: CreateMessageRequestParams = serde_json::from_value(request_of(prompt))
                .map_err(|error| {
                    LlmError::Failed(format!("pi-repl could not build the request: {error}"))
                })?;
            let request = ServerRequest::CreateMessageRequest(CreateMessageRequest::new(params));
            let mut handle = client
                .peer
                .send_cancellable_request(request, PeerRequestOptions::no_options())
                .await
                .map_err(|error| LlmError::Failed(format!("the MCP client: {error}")))?;
            let response = tokio::select! {
                response = &mut handle.rx => response,
                _ = cancel.cancelled() => {
                    // The client is told (`notifications/cancelled`); its answer is not awaited.
                    let _ = handle.cancel(Some("the cell was interrupted".into())).await;
                    return Err(LlmError::Cancelled);
                }
            };
            match response {
                Ok(Ok(ClientResult::CreateMessageResult(result))) => {
                    let value = serde_json::to_value(&*result).unwrap_or(Value::Null);
                    completion_of(&value)
                }
                Ok(Ok(other)) => Err(LlmError::Failed(format!(
                    "the MCP client answered sampling with something else: {other:?}"
                ))),
                Ok(Err(error)) => Err(LlmError::Failed(format!(
                    "the MCP client refused or failed the request: {error}"
                ))),
                Err(_) => Err(LlmError::Failed(
                    "the MCP client went away before answering".to_string(),
                )),
            }
        })
    }
}

/// The `createMessage` params for `prompt` (JSON, then read into rmcp's type).
fn request_of(prompt: &Prompt) -> Value {
    let mut params = json!({
        "messages": [{"role": "user", "content": {"type": "text", "text": prompt.prompt}}],
        "maxTokens": prompt.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
    });
    if let Some(system) = super::system_prompt(prompt) {
        params["systemPrompt"] = json!(system);
    }
    if let Some(model) = &prompt.model {
        params["modelPreferences"] = json!({"hints": [{"name": model}]});
    }
    params
}

/// The text of a `createMessage` result (content as one block or a list).
fn completion_of(result: &Value) -> Result<Completion, LlmError> {
    let content = &result["content"];
    let blocks: Vec<&Value> = match content {
        Value::Array(blocks) => blocks.iter().collect(),
        block => vec![block],
    };
    let text: Vec<&str> = blocks
        .iter()
        .filter(|block| block["type"] == "text")
        .filter_map(|block| block["text"].as_str())
        .collect();
    if text.is_empty() {
        return Err(LlmError::Failed(format!(
            "the MCP client's answer has no text: {content}"
        )));
    }
    // The pi extension reports the model's token counts here; other clients report none.
    let usage = &result["_meta"][USAGE_META];
    Ok(Completion {
        text: text.join(""),
        model: result["model"].as_str().map(str::to_string),
        input_tokens: usage["input_tokens"].as_u64(),
        output_tokens: usage["output_tokens"].as_u64(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prompt_becomes_a_create_message_request_rmcp_accepts() {
        let prompt = Prompt {
            prompt: "Summarise.".into(),
            system: Some("Be brief.".into()),
            max_tokens: Some(100),
            model: Some("claude".into()),
            schema: Some(json!({"type": "object"})),
        };
        let value = request_of(&prompt);
        let params: CreateMessageRequestParams = serde_json::from_value(value.clone()).unwrap();
        assert_eq!(params.max_tokens, 100);
        let system = params.system_prompt.unwrap();
        assert!(system.starts_with("Be brief.\n\nAnswer with a single JSON value"));
        assert_eq!(value["modelPreferences"]["hints"][0]["name"], "claude");
    }

    #[test]
    fn the_answer_text_is_read_from_one_block_or_many() {
        let one =
            json!({"model": "m", "role": "assistant", "content": {"type": "text", "text": "hi"}});
        assert_eq!(completion_of(&one).unwrap().text, "hi");
        let many = json!({"model": "m", "role": "assistant", "content": [
            {"type": "text", "text": "a"}, {"type": "text", "text": "b"}]});
        assert_eq!(completion_of(&many).unwrap().text, "ab");
        let counted = json!({"model": "m", "role": "assistant", "content": {"type": "text", "text": "x"},
            "_meta": {"pi-repl/usage": {"input_tokens": 11, "output_tokens": 5}}});
        let completion = completion_of(&counted).unwrap();
        assert_eq!(
            (completion.input_tokens, completion.output_tokens),
            (Some(11), Some(5))
        );
        assert_eq!(
            completion_of(&one).unwrap().input_tokens,
            None,
            "not reported"
        );
        let image = json!({"model": "m", "role": "assistant", "content": {"type": "image", "data": "", "mimeType": "image/png"}});
        assert!(completion_of(&image).is_err());
    }
}
