//! Model requests answered by an endpoint the user configured for the host: an OpenAI-compatible
//! chat-completions API or Anthropic's Messages API, at a base URL, with a model.
//!
//! The key is read by the host from its own environment (`PI_REPL_LLM_API_KEY`, or the variable
//! named by `--llm-api-key-env`) and only ever sent to the configured URL: redirects are not
//! followed (an `x-api-key` header would survive one), and no error message carries it (an echo
//! of it in an answer's body is replaced by `[key]`). Without a key no auth header is sent, for
//! local endpoints. A loopback endpoint is reached directly, never through `HTTP_PROXY`.
//!
//! Owns: turning a [`Prompt`] into the API's request body, reading the answer's text, model and
//! usage, and describing failures (HTTP status with the start of the body, an unreachable URL,
//! a malformed answer). Cancellation drops the request (the connection closes). The time limit
//! is not here: `kernel_requests` applies `--llm-timeout-ms` to every broker.
//!
//! A loopback endpoint gets a new connection per request. A local server that leaves Nagle's
//! algorithm on and writes an answer's head and body apart (Python's `http.server` does) holds
//! the body until the head is acknowledged, and Linux delays that acknowledgement by up to 40 ms
//! on a kept-alive connection, but not on a new one: 100 prompts at concurrency 4 took 1.81×
//! the ideal time kept alive, 1.07× now, as a new-connection Python client does (1.08×;
//! `cargo bench --bench llm_query -- batched`). `TCP_NODELAY` on our side cannot help (it is
//! reqwest's default); `TCP_QUICKACK` would, but reqwest does not expose its sockets. On
//! loopback a connection costs tens of microseconds; a remote endpoint keeps its pooled TLS
//! connections.
//!
//! TLS is rustls with the `ring` provider (already built for the kernel's message signing)
//! rather than reqwest's default aws-lc-rs, which needs a C toolchain build of its own; the
//! provider is installed as the process default when the first endpoint is set up.

use std::error::Error as _;
use std::time::Duration;

use reqwest::Url;
use reqwest::header::{AUTHORIZATION, HeaderName, HeaderValue};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::sampling::DEFAULT_MAX_TOKENS;
use super::{BoxFuture, Completion, LlmError, ModelBroker, Prompt, system_prompt};

/// Characters of an answer's body quoted in an error.
const QUOTED_BODY_CHARS: usize = 500;

/// The `anthropic-version` header the Messages API requires.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// Which API the endpoint speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Api {
    /// `POST {base}/chat/completions`, a Bearer key (OpenAI, and the many servers that copy it:
    /// vLLM, llama.cpp, Ollama, LM Studio, OpenRouter, ...).
    #[default]
    #[value(name = "openai")]
    OpenAi,
    /// `POST {base}/v1/messages`, an `x-api-key` key.
    #[value(name = "anthropic")]
    Anthropic,
}

impl Api {
    /// The vendor's own base URL, used when a model is given without `--llm-base-url`.
    pub fn default_base_url(self) -> &'static str {
        match self {
            Api::OpenAi => "https://api.openai.com/v1",
            Api::Anthropic => "https://api.anthropic.com",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Api::OpenAi => "OpenAI-compatible",
            Api::Anthropic => "Anthropic",
        }
    }
}

/// An API key, never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    pub fn new(secret: String) -> ApiKey {
        ApiKey(secret)
    }
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiKey([key])")
    }
}

/// What the user configured.
#[derive(Debug, Clone)]
pub struct Endpoint {
    pub api: Api,
    /// The API's base URL (`https://api.openai.com/v1`, `http://127.0.0.1:11434/v1`,
    /// `https://api.anthropic.com`).
    pub base_url: Url,
    /// The model asked when the cell names none.
    pub model: String,
    pub key: Option<ApiKey>,
}

impl Endpoint {
    /// Reads a base URL: `http` or `https`, with a host.
    pub fn parse_base_url(text: &str) -> Result<Url, String> {
        let url = Url::parse(text.trim()).map_err(|error| format!("{text:?}: {error}"))?;
        if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
            return Err(format!("{text:?} is not an http:// or https:// URL"));
        }
        Ok(url)
    }

    /// Where requests go: `{base}/chat/completions`, or `{base}/v1/messages` (a base that
    /// already ends in `/v1` is not given a second one). The base's query is kept
    /// (`?api-version=...`).
    pub fn request_url(&self) -> Url {
        let mut url = self.base_url.clone();
        url.set_fragment(None);
        let base = url.path().trim_end_matches('/').to_string();
        let path = match self.api {
            Api::OpenAi => format!("{base}/chat/completions"),
            Api::Anthropic if base.ends_with("/v1") => format!("{base}/messages"),
            Api::Anthropic => format!("{base}/v1/messages"),
        };
        url.set_path(&path);
        url
    }
}

/// A configured endpoint as a model broker.
pub struct HttpProvider {
    endpoint: Endpoint,
    url: Url,
    client: reqwest::Client,
    /// `Authorization: Bearer …` or `x-api-key: …`, marked sensitive (never logged).
    auth: Option<(HeaderName, HeaderValue)>,
}

impl HttpProvider {
    pub fn new(endpoint: Endpoint) -> anyhow::Result<HttpProvider> {
        // Only ring is built in (see the module doc); an earlier install is kept.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let url = endpoint.request_url();
        let mut builder = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("pi-repl/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(Duration::from_secs(30))
            // reqwest's default, said here: a request leaves in one segment, never held back.
            .tcp_nodelay(true);
        if is_loopback(&url) {
            // A new connection per request (see the module doc: Nagle on the server's side).
            builder = builder.no_proxy().pool_max_idle_per_host(0);
        }
        let client = builder
            .build()
            .map_err(|error| anyhow::anyhow!("cannot set up the HTTP client: {error}"))?;
        let auth = match &endpoint.key {
            Some(ApiKey(key)) => {
                let (name, value) = match endpoint.api {
                    Api::OpenAi => (AUTHORIZATION, format!("Bearer {key}")),
                    Api::Anthropic => (HeaderName::from_static("x-api-key"), key.clone()),
                };
                let mut value = HeaderValue::from_str(&value)
                    .map_err(|_| anyhow::anyhow!("the API key is not a valid HTTP header value"))?;
                value.set_sensitive(true);
                Some((name, value))
            }
            None => None,
        };
        Ok(HttpProvider {
            endpoint,
            url,
            client,
            auth,
        })
    }

    /// The request body for `prompt`.
    fn body_of(&self, prompt: &Prompt) -> Value {
        let model = prompt.model.as_deref().unwrap_or(&self.endpoint.model);
        let system = system_prompt(prompt);
        match self.endpoint.api {
            Api::OpenAi => {
                let mut messages = Vec::new();
                if let Some(system) = system {
                    messages.push(json!({"role": "system", "content": system}));
                }
                messages.push(json!({"role": "user", "content": prompt.prompt}));
                let mut body = json!({"model": model, "messages": messages});
                if let Some(max_tokens) = prompt.max_tokens {
                    body["max_tokens"] = json!(max_tokens);
                }
                body
            }
            Api::Anthropic => {
                let mut body = json!({
                    "model": model,
                    "max_tokens": prompt.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
                    "messages": [{"role": "user", "content": prompt.prompt}],
                });
                if let Some(system) = system {
                    body["system"] = json!(system);
                }
                body
            }
        }
    }

    fn request(&self, prompt: &Prompt) -> reqwest::RequestBuilder {
        let mut request = self
            .client
            .post(self.url.clone())
            .json(&self.body_of(prompt));
        if self.endpoint.api == Api::Anthropic {
            request = request.header("anthropic-version", ANTHROPIC_VERSION);
        }
        match &self.auth {
            Some((name, value)) => request.header(name, value.clone()),
            None => request,
        }
    }

    /// Sends `prompt` and reads the answer (status and body).
    async fn exchange(&self, prompt: &Prompt) -> Result<(reqwest::StatusCode, String), LlmError> {
        let unreachable = |error: reqwest::Error| {
            LlmError::Failed(self.redact(format!(
                "could not reach the model endpoint {}: {}",
                self.url,
                error_chain(&error.without_url())
            )))
        };
        let response = self.request(prompt).send().await.map_err(unreachable)?;
        let status = response.status();
        let body = response.text().await.map_err(unreachable)?;
        Ok((status, body))
    }

    /// The completion in a successful answer's body.
    fn completion_of(&self, body: &str) -> Result<Completion, LlmError> {
        let value: Value = serde_json::from_str(body).map_err(|_| {
            self.failed(format!(
                "the model endpoint {} answered with something that is not JSON: {}",
                self.url,
                quoted(body)
            ))
        })?;
        let (text, input, output) = match self.endpoint.api {
            Api::OpenAi => {
                let message = &value["choices"][0]["message"];
                if let Some(refusal) = message["refusal"].as_str() {
                    return Err(self.failed(format!("the model refused: {refusal}")));
                }
                (
                    text_of(&message["content"]),
                    &value["usage"]["prompt_tokens"],
                    &value["usage"]["completion_tokens"],
                )
            }
            Api::Anthropic => (
                text_of(&value["content"]),
                &value["usage"]["input_tokens"],
                &value["usage"]["output_tokens"],
            ),
        };
        let Some(text) = text else {
            return Err(self.failed(format!(
                "the model endpoint {} answered without text: {}",
                self.url,
                quoted(body)
            )));
        };
        Ok(Completion {
            text,
            model: value["model"].as_str().map(str::to_string),
            input_tokens: input.as_u64(),
            output_tokens: output.as_u64(),
        })
    }

    fn failed(&self, message: String) -> LlmError {
        LlmError::Failed(self.redact(message))
    }

    /// `text` with any echo of the key replaced.
    fn redact(&self, text: String) -> String {
        match &self.endpoint.key {
            Some(ApiKey(key)) if !key.is_empty() => text.replace(key.as_str(), "[key]"),
            _ => text,
        }
    }
}

impl ModelBroker for HttpProvider {
    fn available(&self) -> bool {
        true
    }

    fn describe(&self) -> String {
        format!(
            "the {} endpoint {} (model {})",
            self.endpoint.api.label(),
            self.url,
            self.endpoint.model
        )
    }

    fn complete<'a>(
        &'a self,
        prompt: &'a Prompt,
        cancel: CancellationToken,
    ) -> BoxFuture<'a, Result<Completion, LlmError>> {
        Box::pin(async move {
            let (status, body) = tokio::select! {
                answer = self.exchange(prompt) => answer?,
                // Dropping the request closes its connection.
                _ = cancel.cancelled() => return Err(LlmError::Cancelled),
            };
            // Before any of it is quoted (a cut could keep part of an echoed key).
            let body = self.redact(body);
            if !status.is_success() {
                return Err(self.failed(format!(
                    "the model endpoint {} answered HTTP {status}: {}",
                    self.url,
                    quoted(&body)
                )));
            }
            self.completion_of(&body)
        })
    }
}

/// The answer's text: a string, or the text parts of a list of content blocks.
fn text_of(content: &Value) -> Option<String> {
    match content {
        Value::String(text) => Some(text.clone()),
        Value::Array(blocks) => {
            let texts: Vec<&str> = blocks
                .iter()
                .filter(|block| block["type"] == "text")
                .filter_map(|block| block["text"].as_str())
                .collect();
            (!texts.is_empty()).then(|| texts.concat())
        }
        _ => None,
    }
}

/// The start of a body, for an error.
fn quoted(body: &str) -> String {
    let body = body.trim();
    match body.char_indices().nth(QUOTED_BODY_CHARS) {
        Some((cut, _)) => format!("{}…", &body[..cut]),
        None if body.is_empty() => "(empty body)".to_string(),
        None => body.to_string(),
    }
}

/// An error and its causes, `: `-separated (reqwest's own text says only "error sending
/// request").
fn error_chain(error: &reqwest::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// True for `localhost`, 127.0.0.0/8 and `::1`.
fn is_loopback(url: &Url) -> bool {
    let Some(host) = url.host_str() else {
        return false;
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    //! The fake endpoints are a few lines of HTTP/1.1 over a loopback `TcpListener`: enough to
    //! see what pi-repl sends and to answer as the real APIs do (no real endpoint is reachable
    //! from the test machine).

    use super::*;
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
    use tokio::net::{TcpListener, TcpStream};
    use tokio::sync::{mpsc, oneshot};

    const KEY: &str = "sk-test-0123456789abcdef";

    /// One request as the fake endpoint received it.
    #[derive(Debug)]
    struct Seen {
        request_line: String,
        headers: Vec<(String, String)>,
        body: Value,
    }

    impl Seen {
        fn header(&self, name: &str) -> Option<&str> {
            self.headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.as_str())
        }
    }

    async fn read_request(stream: &mut BufReader<TcpStream>) -> Seen {
        let mut request_line = String::new();
        stream.read_line(&mut request_line).await.unwrap();
        let mut headers = Vec::new();
        loop {
            let mut line = String::new();
            stream.read_line(&mut line).await.unwrap();
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            let (name, value) = line.split_once(':').unwrap();
            headers.push((name.trim().to_string(), value.trim().to_string()));
        }
        let length: usize = headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
            .map(|(_, v)| v.parse().unwrap())
            .unwrap_or(0);
        let mut body = vec![0; length];
        stream.read_exact(&mut body).await.unwrap();
        Seen {
            request_line: request_line.trim_end().to_string(),
            headers,
            body: serde_json::from_slice(&body).unwrap_or(Value::Null),
        }
    }

    /// A fake endpoint that answers every request with `status` and `body`; what it received
    /// comes out of the receiver.
    async fn fake_endpoint(
        status: &'static str,
        body: String,
    ) -> (String, mpsc::UnboundedReceiver<Seen>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (seen_tx, seen_rx) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let mut stream = BufReader::new(stream);
                let seen = read_request(&mut stream).await;
                let _ = seen_tx.send(seen);
                let answer = format!(
                    "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.get_mut().write_all(answer.as_bytes()).await;
            }
        });
        (base, seen_rx)
    }

    fn provider(api: Api, base: &str, key: Option<&str>) -> HttpProvider {
        HttpProvider::new(Endpoint {
            api,
            base_url: Endpoint::parse_base_url(base).unwrap(),
            model: "test-model".into(),
            key: key.map(|k| ApiKey::new(k.into())),
        })
        .unwrap()
    }

    fn prompt(text: &str) -> Prompt {
        Prompt {
            prompt: text.into(),
            system: None,
            max_tokens: None,
            model: None,
            schema: None,
        }
    }

    fn openai_answer(text: &str) -> String {
        json!({
            "id": "chatcmpl-1", "object": "chat.completion", "model": "test-model-2026",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15},
        })
        .to_string()
    }

    fn anthropic_answer(text: &str) -> String {
        json!({
            "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
            "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
            "usage": {"input_tokens": 20, "output_tokens": 5},
        })
        .to_string()
    }

    #[tokio::test]
    async fn an_openai_compatible_endpoint_gets_the_prompt_and_the_bearer_key_and_its_answer_is_read()
     {
        let (base, mut seen) = fake_endpoint("200 OK", openai_answer("forty-two")).await;
        let provider = provider(Api::OpenAi, &format!("{base}/v1/"), Some(KEY));
        let asked = Prompt {
            system: Some("Be brief.".into()),
            max_tokens: Some(64),
            schema: Some(json!({"type": "object"})),
            ..prompt("What is six times seven?")
        };
        let answer = provider
            .complete(&asked, CancellationToken::new())
            .await
            .unwrap();
        assert_eq!(answer.text, "forty-two");
        assert_eq!(answer.model.as_deref(), Some("test-model-2026"));
        assert_eq!(
            (answer.input_tokens, answer.output_tokens),
            (Some(12), Some(3))
        );

        let seen = seen.recv().await.unwrap();
        assert_eq!(seen.request_line, "POST /v1/chat/completions HTTP/1.1");
        assert_eq!(
            seen.header("authorization"),
            Some(&*format!("Bearer {KEY}"))
        );
        assert_eq!(seen.header("x-api-key"), None);
        assert_eq!(seen.header("content-type"), Some("application/json"));
        assert_eq!(seen.body["model"], "test-model");
        assert_eq!(seen.body["max_tokens"], 64);
        let messages = seen.body["messages"].as_array().unwrap();
        assert_eq!(messages.len(), 2);
        assert_eq!(messages[0]["role"], "system");
        let system = messages[0]["content"].as_str().unwrap();
        assert!(
            system.starts_with("Be brief.\n\nAnswer with a single JSON value"),
            "{system}"
        );
        assert!(system.contains(r#"{"type":"object"}"#), "{system}");
        assert_eq!(
            messages[1],
            json!({"role": "user", "content": "What is six times seven?"})
        );
    }

    #[tokio::test]
    async fn without_a_key_no_auth_header_is_sent_and_the_cells_model_and_defaults_are_used() {
        let (base, mut seen) = fake_endpoint("200 OK", openai_answer("hi")).await;
        let provider = provider(Api::OpenAi, &base, None);
        let asked = Prompt {
            model: Some("other-model".into()),
            ..prompt("hello")
        };
        provider
            .complete(&asked, CancellationToken::new())
            .await
            .unwrap();
        let seen = seen.recv().await.unwrap();
        assert_eq!(seen.request_line, "POST /chat/completions HTTP/1.1");
        assert_eq!(seen.header("authorization"), None);
        assert_eq!(seen.body["model"], "other-model");
        assert_eq!(seen.body.get("max_tokens"), None, "{}", seen.body);
        assert_eq!(
            seen.body["messages"],
            json!([{"role": "user", "content": "hello"}])
        );
    }

    #[tokio::test]
    async fn an_anthropic_endpoint_gets_the_x_api_key_the_version_and_max_tokens_and_its_answer_is_read()
     {
        let (base, mut seen) = fake_endpoint("200 OK", anthropic_answer("bonjour")).await;
        let provider = provider(Api::Anthropic, &base, Some(KEY));
        let asked = Prompt {
            system: Some("Answer in French.".into()),
            ..prompt("hello")
        };
        let answer = provider
            .complete(&asked, CancellationToken::new())
            .await
            .unwrap();
        assert_eq!(answer.text, "bonjour");
        assert_eq!(answer.model.as_deref(), Some("claude-test"));
        assert_eq!(
            (answer.input_tokens, answer.output_tokens),
            (Some(20), Some(5))
        );

        let seen = seen.recv().await.unwrap();
        assert_eq!(seen.request_line, "POST /v1/messages HTTP/1.1");
        assert_eq!(seen.header("x-api-key"), Some(KEY));
        assert_eq!(seen.header("authorization"), None);
        assert_eq!(seen.header("anthropic-version"), Some(ANTHROPIC_VERSION));
        assert_eq!(seen.body["model"], "test-model");
        assert_eq!(seen.body["max_tokens"], DEFAULT_MAX_TOKENS);
        assert_eq!(seen.body["system"], "Answer in French.");
        assert_eq!(
            seen.body["messages"],
            json!([{"role": "user", "content": "hello"}])
        );
    }

    #[test]
    fn request_urls_follow_each_api() {
        let endpoint = |api, base: &str| Endpoint {
            api,
            base_url: Endpoint::parse_base_url(base).unwrap(),
            model: "m".into(),
            key: None,
        };
        let url = |api, base| endpoint(api, base).request_url().to_string();
        assert_eq!(
            url(Api::OpenAi, "https://api.openai.com/v1"),
            "https://api.openai.com/v1/chat/completions"
        );
        assert_eq!(
            url(Api::OpenAi, "http://127.0.0.1:11434/v1/"),
            "http://127.0.0.1:11434/v1/chat/completions"
        );
        assert_eq!(
            url(Api::Anthropic, "https://api.anthropic.com"),
            "https://api.anthropic.com/v1/messages"
        );
        assert_eq!(
            url(Api::Anthropic, "https://api.anthropic.com/v1/"),
            "https://api.anthropic.com/v1/messages"
        );
        assert_eq!(
            url(
                Api::OpenAi,
                "https://example.test/openai/v1?api-version=2025-01"
            ),
            "https://example.test/openai/v1/chat/completions?api-version=2025-01"
        );
        assert!(Endpoint::parse_base_url("ftp://example.test").is_err());
        assert!(Endpoint::parse_base_url("not a url").is_err());
    }

    #[tokio::test]
    async fn an_http_error_gives_the_status_and_the_start_of_the_body_without_the_key() {
        let body = format!(
            "{{\"error\": {{\"message\": \"Incorrect API key provided: {KEY}\"}}}}{}",
            "x".repeat(2000)
        );
        let (base, _seen) = fake_endpoint("500 Internal Server Error", body).await;
        let provider = provider(Api::OpenAi, &base, Some(KEY));
        let error = provider
            .complete(&prompt("hi"), CancellationToken::new())
            .await
            .unwrap_err();
        let LlmError::Failed(message) = &error else {
            panic!("not a failure: {error:?}");
        };
        assert!(
            message.contains("answered HTTP 500 Internal Server Error"),
            "{message}"
        );
        assert!(
            message.contains(&format!("{base}/chat/completions")),
            "{message}"
        );
        assert!(
            message.contains("Incorrect API key provided: [key]"),
            "{message}"
        );
        assert!(!message.contains(KEY), "{message}");
        assert!(
            message.len() < 800,
            "the body is cut: {} chars",
            message.len()
        );
    }

    #[tokio::test]
    async fn a_refused_connection_names_the_url_and_not_the_key() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        drop(listener); // nothing listens there now
        let provider = provider(Api::Anthropic, &base, Some(KEY));
        let error = provider
            .complete(&prompt("hi"), CancellationToken::new())
            .await
            .unwrap_err();
        let LlmError::Failed(message) = &error else {
            panic!("not a failure: {error:?}");
        };
        assert!(
            message.starts_with(&format!(
                "could not reach the model endpoint {base}/v1/messages: "
            )),
            "{message}"
        );
        assert!(message.to_lowercase().contains("refused"), "{message}");
        assert!(!message.contains(KEY), "{message}");
    }

    #[tokio::test]
    async fn cancelling_drops_the_request_and_its_connection() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (received_tx, received_rx) = oneshot::channel();
        let (closed_tx, closed_rx) = oneshot::channel();
        tokio::spawn(async move {
            let (stream, _) = listener.accept().await.unwrap();
            let mut stream = BufReader::new(stream);
            read_request(&mut stream).await;
            let _ = received_tx.send(());
            // Never answers; reads until the client closes the connection.
            let mut rest = Vec::new();
            let _ = stream.read_to_end(&mut rest).await;
            let _ = closed_tx.send(());
        });
        let provider = provider(Api::OpenAi, &base, None);
        let cancel = CancellationToken::new();
        let asked = prompt("a long question");
        let request = provider.complete(&asked, cancel.clone());
        let cancel_once_received = async {
            received_rx.await.unwrap();
            cancel.cancel();
        };
        // The limit only turns a request that cancelling failed to end into a failure
        // instead of a hang; the test waits for the events themselves.
        let ended = tokio::time::timeout(Duration::from_secs(120), async {
            let (result, ()) = tokio::join!(request, cancel_once_received);
            assert_eq!(result.unwrap_err(), LlmError::Cancelled);
            closed_rx.await.expect("the connection is closed");
        });
        ended.await.expect("cancelling ended the request");
    }

    #[tokio::test]
    async fn malformed_answers_are_errors_that_quote_them() {
        let cases = [
            (
                Api::OpenAi,
                "<html>bad gateway</html>".to_string(),
                "not JSON",
            ),
            (
                Api::OpenAi,
                json!({"choices": []}).to_string(),
                "without text",
            ),
            (
                Api::OpenAi,
                json!({"choices": [{"message": {"content": null, "refusal": "I can't."}}]})
                    .to_string(),
                "the model refused: I can't.",
            ),
            (
                Api::Anthropic,
                json!({"content": [{"type": "tool_use", "id": "t", "name": "x", "input": {}}]})
                    .to_string(),
                "without text",
            ),
        ];
        for (api, body, expected) in cases {
            let (base, _seen) = fake_endpoint("200 OK", body.clone()).await;
            let error = provider(api, &base, None)
                .complete(&prompt("hi"), CancellationToken::new())
                .await
                .unwrap_err();
            assert_eq!(error.kind(), "LLMError", "{error:?}");
            assert!(error.to_string().contains(expected), "{body}: {error}");
        }
    }

    #[tokio::test]
    async fn a_redirect_is_not_followed_so_the_key_goes_nowhere_else() {
        let (elsewhere, mut seen_elsewhere) =
            fake_endpoint("200 OK", anthropic_answer("followed")).await;
        let target = format!("{elsewhere}/v1/messages");
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            let (stream, _) = listener.accept().await.unwrap();
            let mut stream = BufReader::new(stream);
            read_request(&mut stream).await;
            let answer = format!(
                "HTTP/1.1 307 Temporary Redirect\r\nlocation: {target}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
            );
            let _ = stream.get_mut().write_all(answer.as_bytes()).await;
        });
        let error = provider(Api::Anthropic, &base, Some(KEY))
            .complete(&prompt("hi"), CancellationToken::new())
            .await
            .unwrap_err();
        assert!(error.to_string().contains("answered HTTP 307"), "{error}");
        assert!(
            seen_elsewhere.try_recv().is_err(),
            "the redirect's target got a request"
        );
    }

    #[test]
    fn a_key_that_cannot_be_a_header_is_refused_without_showing_it() {
        let error = HttpProvider::new(Endpoint {
            api: Api::Anthropic,
            base_url: Endpoint::parse_base_url("http://127.0.0.1:1").unwrap(),
            model: "m".into(),
            key: Some(ApiKey::new(format!("{KEY}\nX-Other: 1"))),
        })
        .err()
        .unwrap()
        .to_string();
        assert_eq!(error, "the API key is not a valid HTTP header value");
    }

    #[test]
    fn the_key_is_not_printed_by_debug() {
        let endpoint = Endpoint {
            api: Api::OpenAi,
            base_url: Endpoint::parse_base_url("http://127.0.0.1:1").unwrap(),
            model: "m".into(),
            key: Some(ApiKey::new(KEY.into())),
        };
        assert!(!format!("{endpoint:?}").contains(KEY));
    }
}
