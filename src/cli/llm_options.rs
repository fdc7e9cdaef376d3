//! Settings for models called from a cell (`llm_query`): the host-side endpoint that answers
//! when the MCP client cannot, and the budgets of every model request.
//!
//! Owns: the `--llm-*` flags and their `PI_REPL_LLM_*` variables (clap's `env`: a flag wins,
//! both are read once with the command line), the key from the host's own environment
//! (`PI_REPL_LLM_API_KEY`, or the variable `--llm-api-key-env` names), and turning them into the
//! host provider and the [`Limits`]. The key is read here, in the host, and only handed to the
//! provider; it is never put in the kernel's configuration.

use std::sync::Arc;
use std::time::Duration;

use super::values;
use crate::env_vars;
use crate::llm::ModelBroker;
use crate::llm::ledger::Limits;
use crate::llm::provider::{Api, ApiKey, Endpoint, HttpProvider};

#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "Models called from a cell (llm_query)")]
pub struct LlmOptions {
    /// The API of the endpoint that answers `llm_query` when the MCP client cannot.
    #[arg(long, value_name = "API", value_enum, env = env_vars::PI_REPL_LLM_API,
          ignore_case = true, default_value_t = Api::default())]
    pub llm_api: Api,

    /// Base URL of that endpoint, e.g. http://127.0.0.1:11434/v1 [default: the API's own].
    #[arg(long, value_name = "URL", env = env_vars::PI_REPL_LLM_BASE_URL,
          value_parser = values::text)]
    pub llm_base_url: Option<String>,

    /// The model asked there; setting it turns the endpoint on.
    #[arg(long, value_name = "NAME", env = env_vars::PI_REPL_LLM_MODEL,
          value_parser = values::text)]
    pub llm_model: Option<String>,

    /// The variable of pi-repl's environment holding the endpoint's key (read by pi-repl,
    /// never passed to the kernel) [default: PI_REPL_LLM_API_KEY].
    #[arg(long, value_name = "NAME", env = env_vars::PI_REPL_LLM_API_KEY_ENV,
          value_parser = values::text)]
    pub llm_api_key_env: Option<String>,

    /// Model requests one cell may make.
    #[arg(long, value_name = "N", env = env_vars::PI_REPL_LLM_MAX_CALLS_PER_CELL,
          value_parser = values::whole, default_value_t = Limits::default().calls_per_cell)]
    pub llm_max_calls_per_cell: u64,

    /// Model requests the session may make.
    #[arg(long, value_name = "N", env = env_vars::PI_REPL_LLM_MAX_CALLS,
          value_parser = values::whole, default_value_t = Limits::default().calls_per_session)]
    pub llm_max_calls: u64,

    /// Input plus output tokens the session may use.
    #[arg(long, value_name = "N", env = env_vars::PI_REPL_LLM_MAX_TOKENS,
          value_parser = values::whole, default_value_t = Limits::default().tokens_per_session)]
    pub llm_max_tokens: u64,

    /// Largest prompt sent, in estimated tokens (4 characters each).
    #[arg(long, value_name = "N", env = env_vars::PI_REPL_LLM_MAX_PROMPT_TOKENS,
          value_parser = values::whole, default_value_t = Limits::default().prompt_tokens)]
    pub llm_max_prompt_tokens: u64,

    /// How long one model request may take, in milliseconds.
    #[arg(long, value_name = "MS", env = env_vars::PI_REPL_LLM_TIMEOUT_MS,
          value_parser = values::at_least(1),
          default_value_t = Limits::default().timeout.as_millis() as u64)]
    pub llm_timeout_ms: u64,
}

/// The host's environment, as the key is read from it (a function, so tests need not change
/// the process's environment).
type Lookup<'a> = &'a dyn Fn(&str) -> anyhow::Result<Option<String>>;

/// Reads variable `name` of pi-repl's own environment; unset or empty is `None`.
fn host_variable(name: &str) -> anyhow::Result<Option<String>> {
    match std::env::var(name) {
        Ok(value) if value.trim().is_empty() => Ok(None),
        Ok(value) => Ok(Some(value)),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => anyhow::bail!("{name} is not valid UTF-8"),
    }
}

impl LlmOptions {
    /// The host-side provider, if one is configured, and the budgets, from the settings and
    /// the key in the process's environment.
    pub fn resolve(&self) -> anyhow::Result<(Option<Arc<dyn ModelBroker>>, Limits)> {
        self.resolve_with(&host_variable)
    }

    fn resolve_with(
        &self,
        env: Lookup<'_>,
    ) -> anyhow::Result<(Option<Arc<dyn ModelBroker>>, Limits)> {
        let limits = self.limits();
        let provider = match self.endpoint(env)? {
            Some(endpoint) => Some(Arc::new(HttpProvider::new(endpoint)?) as Arc<dyn ModelBroker>),
            None => None,
        };
        Ok((provider, limits))
    }

    /// Sets up who answers `config`'s cells' `llm_query` and their budgets (a durable session's
    /// totals are kept in `session_dir`), and withholds the endpoint's key variable from the
    /// kernel whatever else is passed.
    pub fn apply(
        &self,
        config: &mut crate::engine::EngineConfig,
        session_dir: Option<&std::path::Path>,
    ) -> anyhow::Result<()> {
        let (provider, limits) = self.resolve()?;
        config.llm = Some(crate::llm::kernel_requests::Answerer {
            brokers: crate::llm::Brokers::new(provider.into_iter().collect()),
            ledger: Arc::new(crate::llm::ledger::Ledger::new(limits, session_dir)),
        });
        config.kernel.withhold.push(self.key_variable());
        Ok(())
    }

    /// The name of the host variable the endpoint's key is read from, so the kernel's
    /// environment can withhold it even under `--pass-credentials`.
    pub fn key_variable(&self) -> String {
        self.llm_api_key_env
            .clone()
            .unwrap_or_else(|| env_vars::PI_REPL_LLM_API_KEY.to_string())
    }

    /// The configured endpoint: none when neither a model nor a base URL is given.
    fn endpoint(&self, env: Lookup<'_>) -> anyhow::Result<Option<Endpoint>> {
        let model = match (&self.llm_model, &self.llm_base_url) {
            (None, None) => return Ok(None),
            (None, Some(url)) => anyhow::bail!(
                "--llm-base-url {url} (or {}) is given without a model: add --llm-model NAME \
                 (or {})",
                env_vars::PI_REPL_LLM_BASE_URL,
                env_vars::PI_REPL_LLM_MODEL
            ),
            (Some(model), _) => model,
        };
        let base_url = match &self.llm_base_url {
            Some(text) => Endpoint::parse_base_url(text).map_err(|error| {
                anyhow::anyhow!(
                    "--llm-base-url (or {}): {error}",
                    env_vars::PI_REPL_LLM_BASE_URL
                )
            })?,
            None => Endpoint::parse_base_url(self.llm_api.default_base_url())
                .map_err(|error| anyhow::anyhow!("the default base URL: {error}"))?,
        };
        let key = match &self.llm_api_key_env {
            // A variable named on purpose must hold the key.
            Some(name) => match env(name)? {
                Some(key) => Some(key),
                None => anyhow::bail!(
                    "--llm-api-key-env {name}: pi-repl's environment has no {name} (or it is \
                     empty); set it to the endpoint's key, or drop --llm-api-key-env (or {}) for \
                     an endpoint without one",
                    env_vars::PI_REPL_LLM_API_KEY_ENV
                ),
            },
            None => env(env_vars::PI_REPL_LLM_API_KEY)?,
        };
        let key = key.map(|key| ApiKey::new(key.trim().to_string()));
        Ok(Some(Endpoint {
            api: self.llm_api,
            base_url,
            model: model.clone(),
            key,
        }))
    }

    fn limits(&self) -> Limits {
        Limits {
            calls_per_cell: self.llm_max_calls_per_cell,
            calls_per_session: self.llm_max_calls,
            tokens_per_session: self.llm_max_tokens,
            prompt_tokens: self.llm_max_prompt_tokens,
            timeout: Duration::from_millis(self.llm_timeout_ms),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Command {
        #[command(flatten)]
        llm: LlmOptions,
    }

    /// The options as parsed from `args` alone, whatever `PI_REPL_LLM_*` variables the test
    /// process has. (Values from variables are pinned by `tests/cli_front_door.rs`.)
    fn options(args: &[&str]) -> LlmOptions {
        use clap::{CommandFactory, FromArgMatches};
        let matches = Command::command()
            .mut_args(|arg| arg.env(None))
            .try_get_matches_from(std::iter::once("pi-repl").chain(args.iter().copied()))
            .unwrap();
        Command::from_arg_matches(&matches).unwrap().llm
    }

    /// An environment holding `vars` only.
    fn environment(vars: &[(&str, &str)]) -> impl Fn(&str) -> anyhow::Result<Option<String>> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect();
        move |name: &str| Ok(vars.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone()))
    }

    #[test]
    fn nothing_configured_gives_no_provider_and_the_default_limits() {
        let (provider, limits) = options(&[]).resolve_with(&environment(&[])).unwrap();
        assert!(provider.is_none());
        assert_eq!(limits, Limits::default());
    }

    #[test]
    fn flags_configure_the_endpoint_and_the_limits() {
        let env = environment(&[("MY_KEY", "sk-mine")]);
        let options = options(&[
            "--llm-api",
            "anthropic",
            "--llm-base-url",
            "http://127.0.0.1:9/",
            "--llm-model",
            "flag-model",
            "--llm-api-key-env",
            "MY_KEY",
            "--llm-max-calls-per-cell",
            "10",
            "--llm-max-calls",
            "0",
            "--llm-max-tokens",
            "1000",
            "--llm-max-prompt-tokens",
            "500",
            "--llm-timeout-ms",
            "1500",
        ]);
        let endpoint = options.endpoint(&env).unwrap().unwrap();
        assert_eq!(endpoint.api, Api::Anthropic);
        assert_eq!(endpoint.model, "flag-model");
        assert_eq!(
            endpoint.request_url().as_str(),
            "http://127.0.0.1:9/v1/messages"
        );
        assert_eq!(endpoint.key, Some(ApiKey::new("sk-mine".into())));
        let (provider, limits) = options.resolve_with(&env).unwrap();
        assert!(
            provider.unwrap().describe().contains("flag-model"),
            "the provider is the configured one"
        );
        assert_eq!(
            limits,
            Limits {
                calls_per_cell: 10,
                calls_per_session: 0,
                tokens_per_session: 1000,
                prompt_tokens: 500,
                timeout: Duration::from_millis(1500),
            }
        );
    }

    #[test]
    fn the_default_key_variable_holds_the_key_and_the_api_ignores_case() {
        let env = environment(&[(env_vars::PI_REPL_LLM_API_KEY, "sk-default")]);
        let endpoint = options(&[
            "--llm-api",
            "OpenAI",
            "--llm-model",
            "llama",
            "--llm-base-url",
            "http://localhost:11434/v1",
        ])
        .endpoint(&env)
        .unwrap()
        .unwrap();
        assert_eq!(endpoint.api, Api::OpenAi);
        assert_eq!(
            endpoint.request_url().as_str(),
            "http://localhost:11434/v1/chat/completions"
        );
        assert_eq!(endpoint.key, Some(ApiKey::new("sk-default".into())));
    }

    #[test]
    fn a_model_alone_uses_the_apis_own_base_url_and_no_key_means_none() {
        let env = environment(&[]);
        let endpoint = options(&["--llm-api", "anthropic", "--llm-model", "claude"])
            .endpoint(&env)
            .unwrap()
            .unwrap();
        assert_eq!(
            endpoint.request_url().as_str(),
            "https://api.anthropic.com/v1/messages"
        );
        assert_eq!(endpoint.key, None);
    }

    #[test]
    fn the_key_variable_is_named_for_the_kernel_to_withhold() {
        let named = options(&["--llm-api-key-env", "OPENAI_API_KEY"]);
        assert_eq!(named.key_variable(), "OPENAI_API_KEY");
        assert_eq!(options(&[]).key_variable(), env_vars::PI_REPL_LLM_API_KEY);
    }

    #[test]
    fn a_base_url_without_a_model_is_an_error_naming_what_to_add() {
        let error = options(&["--llm-base-url", "http://127.0.0.1:8000/v1"])
            .resolve_with(&environment(&[]))
            .err()
            .unwrap()
            .to_string();
        assert!(error.starts_with("--llm-base-url"), "{error}");
        assert!(error.contains(env_vars::PI_REPL_LLM_BASE_URL), "{error}");
        assert!(error.contains("--llm-model"), "{error}");
    }

    #[test]
    fn malformed_values_are_errors_naming_the_flag() {
        let error = |args: &[&str]| {
            options(args)
                .resolve_with(&environment(&[]))
                .err()
                .unwrap()
                .to_string()
        };
        let bad_url = error(&["--llm-model", "m", "--llm-base-url", "ftp://x.test"]);
        assert!(bad_url.starts_with("--llm-base-url"), "{bad_url}");
        let unset_key = error(&["--llm-model", "m", "--llm-api-key-env", "NOT_SET_HERE"]);
        assert!(
            unset_key.starts_with("--llm-api-key-env NOT_SET_HERE: pi-repl's environment has no"),
            "{unset_key}"
        );
        for (flag, value) in [
            ("--llm-api", "gemini"),
            ("--llm-max-calls", "ten"),
            ("--llm-timeout-ms", "0"),
        ] {
            let refused = Command::try_parse_from(["pi-repl", flag, value]).unwrap_err();
            assert!(refused.to_string().contains(flag), "{refused}");
        }
    }
}
