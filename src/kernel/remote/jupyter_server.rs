//! The REST side of a Jupyter Server (or a gateway speaking its API): start, look up,
//! interrupt, restart and shut down kernels.
//!
//! Owns: the server's address and token, and turning HTTP failures into errors that name the
//! server. Does not own: the kernel's channels (`remote`, over the WebSocket).
//!
//! Invariants: the token travels only in the `Authorization` header (marked sensitive, so it is
//! never logged) and is never part of an error message, a `Debug` output or a URL shown.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::header::{AUTHORIZATION, HeaderValue};
use reqwest::{Method, StatusCode};
use serde::Deserialize;

use crate::kernel::KernelError;

/// How long one REST call may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a replaced kernel's shutdown keeps asking: a server restarting the kernel it saw
/// die may answer the first `DELETE` before the restart is done, and list it again after.
const RETIRE_FOR: Duration = Duration::from_secs(20);

/// Pause between two looks at a kernel being retired.
const RETIRE_PAUSE: Duration = Duration::from_millis(200);

/// A Jupyter Server token. Its `Debug` and `Display` never show it.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Token(pub String);

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_empty() {
            "Token(none)"
        } else {
            "Token(<hidden>)"
        })
    }
}

/// Where the kernels live and how to reach them.
#[derive(Debug, Clone)]
pub struct ServerSpec {
    /// The server's base URL (`http://host:port/prefix`), without query or trailing slash.
    pub url: String,
    pub token: Token,
    /// Attach to this running kernel instead of starting one (and leave it running at exit).
    pub kernel_id: Option<String>,
    /// The kernelspec to start (`python3` unless told otherwise).
    pub kernel_name: String,
}

impl ServerSpec {
    /// Checks the URL and normalises it (no trailing slash, no query: a `?token=` in the URL
    /// is moved into the token if none was given).
    pub fn new(
        url: &str,
        token: Option<String>,
        kernel_id: Option<String>,
        kernel_name: Option<String>,
    ) -> Result<ServerSpec, String> {
        let mut parsed = reqwest::Url::parse(url)
            .map_err(|error| format!("--jupyter-url {url:?} is not a URL: {error}"))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(format!(
                "--jupyter-url must start with http:// or https://, not {}://",
                parsed.scheme()
            ));
        }
        let from_query = parsed
            .query_pairs()
            .find(|(key, _)| key == "token")
            .map(|(_, value)| value.into_owned());
        parsed.set_query(None);
        parsed.set_fragment(None);
        let mut base = parsed.to_string();
        for suffix in ["/lab", "/tree"] {
            if let Some(stripped) = base.strip_suffix(suffix) {
                base = stripped.to_string();
            }
        }
        let url = base.trim_end_matches('/').to_string();
        Ok(ServerSpec {
            url,
            token: Token(token.or(from_query).unwrap_or_default()),
            kernel_id,
            kernel_name: kernel_name.unwrap_or_else(|| "python3".to_string()),
        })
    }
}

/// A kernel as the server lists it.
#[derive(Debug, Clone, Deserialize)]
pub struct KernelModel {
    pub id: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub execution_state: String,
}

/// A client for one server's REST API.
#[derive(Clone)]
pub struct JupyterServer {
    url: String,
    auth: Option<HeaderValue>,
    http: reqwest::Client,
    /// Shutdowns of replaced kernels still under way (`retire`); the host's stop waits for
    /// them (`retired`), so no kernel it started outlives it on the server.
    retiring: Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>>,
}

impl JupyterServer {
    pub fn new(spec: &ServerSpec) -> Result<JupyterServer, KernelError> {
        // Only ring is built in; an earlier install is kept.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut builder = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("pi-repl/", env!("CARGO_PKG_VERSION")))
            .timeout(REQUEST_TIMEOUT);
        if is_loopback(&spec.url) {
            builder = builder.no_proxy();
        }
        let http = builder.build().map_err(|error| KernelError::Remote {
            server: spec.url.clone(),
            detail: format!("cannot set up the HTTP client: {error}"),
        })?;
        let auth = if spec.token.0.is_empty() {
            None
        } else {
            let mut value =
                HeaderValue::from_str(&format!("token {}", spec.token.0)).map_err(|_| {
                    KernelError::Remote {
                        server: spec.url.clone(),
                        detail: "the token is not a valid HTTP header value".into(),
                    }
                })?;
            value.set_sensitive(true);
            Some(value)
        };
        Ok(JupyterServer {
            url: spec.url.clone(),
            auth,
            http,
            retiring: Arc::default(),
        })
    }

    /// The server's base URL (never carries the token).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Starts a kernel of kernelspec `name`, in the server's root directory.
    pub async fn start_kernel(&self, name: &str) -> Result<KernelModel, KernelError> {
        let body = serde_json::json!({ "name": name });
        let response = self
            .call(Method::POST, "api/kernels", Some(body), "start a kernel")
            .await?;
        response
            .json::<KernelModel>()
            .await
            .map_err(|error| self.error(format!("unexpected answer to starting a kernel: {error}")))
    }

    /// The kernel `id`, or `None` when the server does not list it.
    pub async fn kernel(&self, id: &str) -> Result<Option<KernelModel>, KernelError> {
        let path = format!("api/kernels/{id}");
        let response = self
            .send(Method::GET, &path, None, "look up the kernel")
            .await?;
        if response.status() == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        let response = self.check(response, "look up the kernel").await?;
        response
            .json::<KernelModel>()
            .await
            .map(Some)
            .map_err(|error| self.error(format!("unexpected kernel model: {error}")))
    }

    /// Every kernel the server runs.
    pub async fn kernels(&self) -> Result<Vec<KernelModel>, KernelError> {
        let response = self
            .call(Method::GET, "api/kernels", None, "list kernels")
            .await?;
        response
            .json::<Vec<KernelModel>>()
            .await
            .map_err(|error| self.error(format!("unexpected kernel list: {error}")))
    }

    pub async fn interrupt(&self, id: &str) -> Result<(), KernelError> {
        let path = format!("api/kernels/{id}/interrupt");
        self.call(Method::POST, &path, None, "interrupt the kernel")
            .await
            .map(drop)
    }

    pub async fn restart(&self, id: &str) -> Result<(), KernelError> {
        let path = format!("api/kernels/{id}/restart");
        self.call(Method::POST, &path, None, "restart the kernel")
            .await
            .map(drop)
    }

    /// Shuts the kernel down; one that is already gone is fine.
    pub async fn shutdown(&self, id: &str) -> Result<(), KernelError> {
        let path = format!("api/kernels/{id}");
        let response = self
            .send(Method::DELETE, &path, None, "shut the kernel down")
            .await?;
        if response.status() == StatusCode::NOT_FOUND {
            return Ok(());
        }
        self.check(response, "shut the kernel down").await.map(drop)
    }

    /// Shuts down a kernel this host no longer uses (it died and was replaced), in the
    /// background, until the server no longer lists it: a server that restarts a dead kernel
    /// under its id can bring it back after a first `DELETE`. `retired` waits for it.
    pub fn retire(&self, id: String) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let server = self.clone();
        let task = runtime.spawn(async move {
            let deadline = tokio::time::Instant::now() + RETIRE_FOR;
            loop {
                if let Err(error) = server.shutdown(&id).await {
                    tracing::debug!(%error, kernel = %id, "a replaced kernel's shutdown failed");
                }
                if matches!(server.kernel(&id).await, Ok(None)) {
                    return;
                }
                if tokio::time::Instant::now() >= deadline {
                    tracing::warn!(kernel = %id, "cannot shut down a replaced remote kernel");
                    return;
                }
                tokio::time::sleep(RETIRE_PAUSE).await;
            }
        });
        if let Ok(mut retiring) = self.retiring.lock() {
            retiring.retain(|task| !task.is_finished());
            retiring.push(task);
        }
    }

    /// Waits, at most `limit`, for every `retire` under way to end.
    pub async fn retired(&self, limit: Duration) {
        let tasks = match self.retiring.lock() {
            Ok(mut retiring) => std::mem::take(&mut *retiring),
            Err(_) => return,
        };
        let all = async {
            for task in tasks {
                let _ = task.await;
            }
        };
        if tokio::time::timeout(limit, all).await.is_err() {
            tracing::warn!(server = %self.url, "replaced kernels were still shutting down");
        }
    }

    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<serde_json::Value>,
        what: &str,
    ) -> Result<reqwest::Response, KernelError> {
        let response = self.send(method, path, body, what).await?;
        self.check(response, what).await
    }

    async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<serde_json::Value>,
        what: &str,
    ) -> Result<reqwest::Response, KernelError> {
        let mut request = self.http.request(method, format!("{}/{path}", self.url));
        if let Some(auth) = &self.auth {
            request = request.header(AUTHORIZATION, auth.clone());
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        request.send().await.map_err(|error| {
            // reqwest's error carries the URL, which never holds the token (it is a header).
            self.error(format!("cannot {what}: {}", error_chain(&error)))
        })
    }

    async fn check(
        &self,
        response: reqwest::Response,
        what: &str,
    ) -> Result<reqwest::Response, KernelError> {
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let detail = match status {
            StatusCode::FORBIDDEN | StatusCode::UNAUTHORIZED => {
                match refusal_reason(&response.text().await.unwrap_or_default()) {
                    // Enterprise Gateway refuses some users whatever the token (`root` by
                    // default) and says why.
                    Some(reason) => {
                        format!("cannot {what}: the server refused ({status}): {reason}")
                    }
                    None => format!(
                        "cannot {what}: the server refused the token ({status}); check \
                         --jupyter-token or JUPYTER_TOKEN"
                    ),
                }
            }
            StatusCode::NOT_FOUND => format!(
                "cannot {what}: not found ({status}); is this the URL of a Jupyter Server \
                 (its base URL, with any prefix)?"
            ),
            _ => {
                let body = response.text().await.unwrap_or_default();
                let body: String = body.chars().take(300).collect();
                format!("cannot {what}: {status} {body}")
            }
        };
        Err(self.error(detail))
    }

    fn error(&self, detail: String) -> KernelError {
        KernelError::Remote {
            server: self.url.clone(),
            detail,
        }
    }
}

/// The reason a refusal's JSON body gives, unless it only repeats the status ("Forbidden") or
/// is how Jupyter Server answers a wrong token's POST: the request then counts as a browser's
/// without a session, and fails the XSRF check ("'_xsrf' argument missing from POST").
fn refusal_reason(body: &str) -> Option<String> {
    let body: serde_json::Value = serde_json::from_str(body).ok()?;
    let reason = ["reason", "message"]
        .iter()
        .filter_map(|field| body.get(field).and_then(|value| value.as_str()))
        .map(str::trim)
        .find(|text| {
            !text.is_empty()
                && !text.contains("_xsrf")
                && !text.eq_ignore_ascii_case("forbidden")
                && !text.eq_ignore_ascii_case("unauthorized")
        })?;
    Some(reason.chars().take(300).collect())
}

/// The error and its causes on one line (reqwest's top-level message alone says little).
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

fn is_loopback(url: &str) -> bool {
    reqwest::Url::parse(url).is_ok_and(|url| {
        let host = url.host_str().unwrap_or_default();
        let host = host.trim_start_matches('[').trim_end_matches(']');
        host == "localhost"
            || host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_in_the_url_moves_into_the_token_and_out_of_the_url() {
        let spec =
            ServerSpec::new("http://127.0.0.1:8888/lab?token=abc", None, None, None).unwrap();
        assert_eq!(spec.url, "http://127.0.0.1:8888");
        assert_eq!(spec.token.0, "abc");
        assert!(!format!("{spec:?}").contains("abc"));
    }

    #[test]
    fn a_prefix_is_kept_and_a_given_token_wins() {
        let spec = ServerSpec::new(
            "https://hub.example/user/me/?token=old",
            Some("new".into()),
            None,
            Some("deno".into()),
        )
        .unwrap();
        assert_eq!(spec.url, "https://hub.example/user/me");
        assert_eq!(spec.token.0, "new");
        assert_eq!(spec.kernel_name, "deno");
    }

    #[test]
    fn a_refusal_names_the_servers_reason_unless_it_only_repeats_the_status() {
        let gateway = r#"{"reason": "User 'root' is not authorized to start kernel 'Python 3'.", "message": ""}"#;
        assert_eq!(
            refusal_reason(gateway).as_deref(),
            Some("User 'root' is not authorized to start kernel 'Python 3'.")
        );
        assert_eq!(
            refusal_reason(r#"{"reason": "Forbidden", "message": "Forbidden"}"#),
            None
        );
        assert_eq!(
            refusal_reason(r#"{"message": "Forbidden", "reason": null}"#),
            None
        );
        assert_eq!(refusal_reason("<html>403</html>"), None);
        let wrong_token = r#"{"message": "'_xsrf' argument missing from POST", "reason": null}"#;
        assert_eq!(refusal_reason(wrong_token), None);
    }

    #[test]
    fn only_http_urls_are_accepted() {
        assert!(ServerSpec::new("ws://127.0.0.1:1", None, None, None).is_err());
        assert!(ServerSpec::new("not a url", None, None, None).is_err());
    }
}
