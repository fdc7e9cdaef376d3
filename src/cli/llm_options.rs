//! Flags for models called from a cell (`llm_query`): the host-side endpoint that answers when
//! the MCP client cannot, and the budgets of every model request.
//!
//! Owns: reading `--llm-*` and `PI_REPL_LLM_*` (flags win), the key from the host's own
//! environment (`PI_REPL_LLM_API_KEY`, or the variable `--llm-api-key-env` names), and turning
//! them into the host provider and the [`Limits`]. The key is read here, in the host, and only
//! handed to the provider; it is never put in the kernel's configuration.

use std::sync::Arc;
use std::time::Duration;

use crate::env_vars;
use crate::llm::ModelBroker;
use crate::llm::ledger::Limits;
use crate::llm::provider::{Api, ApiKey, Endpoint, HttpProvider};

#[derive(Debug, Clone, Default, clap::Args)]
#[command(next_help_heading = "Models called from a cell (llm_query)")]
pub struct LlmOptions {
    /// The API of the endpoint that answers `llm_query` when the MCP client cannot
    /// [default: openai; env: PI_REPL_LLM_API].
    #[arg(long, value_name = "API", value_enum)]
    pub llm_api: Option<Api>,

    /// Base URL of that endpoint, e.g. http://127.0.0.1:11434/v1 [default: the API's own;
    /// env: PI_REPL_LLM_BASE_URL].
    #[arg(long, value_name = "URL")]
    pub llm_base_url: Option<String>,

    /// The model asked there; setting it turns the endpoint on [env: PI_REPL_LLM_MODEL].
    #[arg(long, value_name = "NAME")]
    pub llm_model: Option<String>,

    /// The variable of pi-repl's environment holding the endpoint's key (read by pi-repl,
    /// never passed to the kernel) [default: PI_REPL_LLM_API_KEY; env:
    /// PI_REPL_LLM_API_KEY_ENV].
    #[arg(long, value_name = "NAME")]
    pub llm_api_key_env: Option<String>,

    /// Model requests one cell may make [default: 200; env: PI_REPL_LLM_MAX_CALLS_PER_CELL].
    #[arg(long, value_name = "N")]
    pub llm_max_calls_per_cell: Option<u64>,

    /// Model requests the session may make [default: 5000; env: PI_REPL_LLM_MAX_CALLS].
    #[arg(long, value_name = "N")]
    pub llm_max_calls: Option<u64>,

    /// Input plus output tokens the session may use [default: 20000000;
    /// env: PI_REPL_LLM_MAX_TOKENS].
    #[arg(long, value_name = "N")]
    pub llm_max_tokens: Option<u64>,

    /// Largest prompt sent, in estimated tokens (4 characters each) [default: 150000;
    /// env: PI_REPL_LLM_MAX_PROMPT_TOKENS].
    #[arg(long, value_name = "N")]
    pub llm_max_prompt_tokens: Option<u64>,

    /// How long one model request may take, in milliseconds [default: 300000;
    /// env: PI_REPL_LLM_TIMEOUT_MS].
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..))]
    pub llm_timeout_ms: Option<u64>,
}

/// The host's environment, as `LlmOptions` reads it (a function, so tests need not change the
/// process's environment).
type Lookup<'a> = &'a dyn Fn(&str) -> anyhow::Result<Option<String>>;

impl LlmOptions {
    /// The host-side provider, if one is configured, and the budgets, from the flags and the
    /// process's environment.
    pub fn resolve(&self) -> anyhow::Result<(Option<Arc<dyn ModelBroker>>, Limits)> {
        self.resolve_with(&env_vars::text)
    }

    fn resolve_with(
        &self,
        env: Lookup<'_>,
    ) -> anyhow::Result<(Option<Arc<dyn ModelBroker>>, Limits)> {
        let limits = self.limits(env)?;
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
        config.kernel.withhold.push(self.key_variable()?);
        Ok(())
    }

    /// The name of the host variable the endpoint's key is read from, so the kernel's
    /// environment can withhold it even under `--pass-credentials`.
    pub fn key_variable(&self) -> anyhow::Result<String> {
        Ok(first(
            &self.llm_api_key_env,
            &env_vars::text,
            env_vars::PI_REPL_LLM_API_KEY_ENV,
        )?
        .map_or_else(
            || env_vars::PI_REPL_LLM_API_KEY.to_string(),
            |(name, _)| name,
        ))
    }

    /// The configured endpoint: none when neither a model nor a base URL is given.
    fn endpoint(&self, env: Lookup<'_>) -> anyhow::Result<Option<Endpoint>> {
        let api = match &self.llm_api {
            Some(api) => *api,
            None => match env(env_vars::PI_REPL_LLM_API)? {
                Some(text) => parse_api(&text).map_err(|error| {
                    anyhow::anyhow!("{}={text:?}: {error}", env_vars::PI_REPL_LLM_API)
                })?,
                None => Api::default(),
            },
        };
        let base_url = first(&self.llm_base_url, env, env_vars::PI_REPL_LLM_BASE_URL)?;
        let model = first(&self.llm_model, env, env_vars::PI_REPL_LLM_MODEL)?;
        let model = match (model, &base_url) {
            (None, None) => return Ok(None),
            (None, Some((url, from))) => anyhow::bail!(
                "{from} {url} is given without a model: add --llm-model NAME (or {})",
                env_vars::PI_REPL_LLM_MODEL
            ),
            (Some((model, _)), _) => model,
        };
        let base_url = match base_url {
            Some((text, from)) => Endpoint::parse_base_url(&text)
                .map_err(|error| anyhow::anyhow!("{from}: {error}"))?,
            None => Endpoint::parse_base_url(api.default_base_url())
                .map_err(|error| anyhow::anyhow!("the default base URL: {error}"))?,
        };
        let key = match first(
            &self.llm_api_key_env,
            env,
            env_vars::PI_REPL_LLM_API_KEY_ENV,
        )? {
            // A variable named on purpose must hold the key.
            Some((name, from)) => match env(&name)? {
                Some(key) => Some(key),
                None => anyhow::bail!(
                    "{from} {name}: pi-repl's environment has no {name} (or it is empty); set it \
                     to the endpoint's key, or drop {from} for an endpoint without one"
                ),
            },
            None => env(env_vars::PI_REPL_LLM_API_KEY)?,
        };
        let key = key.map(|key| ApiKey::new(key.trim().to_string()));
        Ok(Some(Endpoint {
            api,
            base_url,
            model: model.trim().to_string(),
            key,
        }))
    }

    fn limits(&self, env: Lookup<'_>) -> anyhow::Result<Limits> {
        let defaults = Limits::default();
        let number = |flag: Option<u64>, name: &str, default: u64| -> anyhow::Result<u64> {
            match flag {
                Some(n) => Ok(n),
                None => match env(name)? {
                    Some(text) => env_vars::parse_whole_number(name, &text),
                    None => Ok(default),
                },
            }
        };
        let timeout = match self.llm_timeout_ms {
            Some(ms) => Duration::from_millis(ms),
            None => match env(env_vars::PI_REPL_LLM_TIMEOUT_MS)? {
                Some(text) => {
                    match env_vars::parse_whole_number(env_vars::PI_REPL_LLM_TIMEOUT_MS, &text)? {
                        0 => anyhow::bail!(
                            "{}=0: a model request needs at least 1 ms",
                            env_vars::PI_REPL_LLM_TIMEOUT_MS
                        ),
                        ms => Duration::from_millis(ms),
                    }
                }
                None => defaults.timeout,
            },
        };
        Ok(Limits {
            calls_per_cell: number(
                self.llm_max_calls_per_cell,
                env_vars::PI_REPL_LLM_MAX_CALLS_PER_CELL,
                defaults.calls_per_cell,
            )?,
            calls_per_session: number(
                self.llm_max_calls,
                env_vars::PI_REPL_LLM_MAX_CALLS,
                defaults.calls_per_session,
            )?,
            tokens_per_session: number(
                self.llm_max_tokens,
                env_vars::PI_REPL_LLM_MAX_TOKENS,
                defaults.tokens_per_session,
            )?,
            prompt_tokens: number(
                self.llm_max_prompt_tokens,
                env_vars::PI_REPL_LLM_MAX_PROMPT_TOKENS,
                defaults.prompt_tokens,
            )?,
            timeout,
        })
    }
}

/// The flag's value, else the variable's, with where it came from (for errors).
fn first(
    flag: &Option<String>,
    env: Lookup<'_>,
    name: &str,
) -> anyhow::Result<Option<(String, String)>> {
    let flag_name = format!(
        "--{}",
        name.trim_start_matches("PI_REPL_")
            .to_ascii_lowercase()
            .replace('_', "-")
    );
    Ok(match flag.as_deref().map(str::trim) {
        Some(value) if !value.is_empty() => Some((value.to_string(), flag_name)),
        _ => env(name)?.map(|value| (value.trim().to_string(), name.to_string())),
    })
}

fn parse_api(text: &str) -> Result<Api, String> {
    <Api as clap::ValueEnum>::from_str(text.trim(), true)
        .map_err(|_| "not an API pi-repl speaks (use openai or anthropic)".to_string())
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

    fn options(args: &[&str]) -> LlmOptions {
        Command::try_parse_from(std::iter::once("pi-repl").chain(args.iter().copied()))
            .unwrap()
            .llm
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
    fn flags_configure_the_endpoint_and_win_over_the_environment() {
        let env = environment(&[
            (env_vars::PI_REPL_LLM_MODEL, "env-model"),
            (env_vars::PI_REPL_LLM_MAX_CALLS_PER_CELL, "3"),
            ("MY_KEY", "sk-mine"),
        ]);
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
        assert_eq!(limits.calls_per_cell, 10);
        assert_eq!(limits.timeout, Duration::from_millis(1500));
    }

    #[test]
    fn the_environment_configures_what_the_flags_leave_out() {
        let env = environment(&[
            (env_vars::PI_REPL_LLM_API, "OpenAI"),
            (env_vars::PI_REPL_LLM_MODEL, "llama"),
            (env_vars::PI_REPL_LLM_BASE_URL, "http://localhost:11434/v1"),
            (env_vars::PI_REPL_LLM_API_KEY, "sk-default"),
            (env_vars::PI_REPL_LLM_MAX_CALLS, "0"),
            (env_vars::PI_REPL_LLM_MAX_TOKENS, "1000"),
            (env_vars::PI_REPL_LLM_MAX_PROMPT_TOKENS, "500"),
            (env_vars::PI_REPL_LLM_TIMEOUT_MS, "2000"),
        ]);
        let endpoint = options(&[]).endpoint(&env).unwrap().unwrap();
        assert_eq!(endpoint.api, Api::OpenAi);
        assert_eq!(
            endpoint.request_url().as_str(),
            "http://localhost:11434/v1/chat/completions"
        );
        assert_eq!(endpoint.key, Some(ApiKey::new("sk-default".into())));
        let limits = options(&[]).limits(&env).unwrap();
        assert_eq!(
            limits,
            Limits {
                calls_per_cell: Limits::default().calls_per_cell,
                calls_per_session: 0,
                tokens_per_session: 1000,
                prompt_tokens: 500,
                timeout: Duration::from_millis(2000),
            }
        );
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
        assert_eq!(named.key_variable().unwrap(), "OPENAI_API_KEY");
    }

    #[test]
    fn a_base_url_without_a_model_is_an_error_naming_what_to_add() {
        let error = options(&["--llm-base-url", "http://127.0.0.1:8000/v1"])
            .resolve_with(&environment(&[]))
            .err()
            .unwrap()
            .to_string();
        assert!(error.contains("--llm-base-url"), "{error}");
        assert!(error.contains("--llm-model"), "{error}");
        let error = options(&[])
            .resolve_with(&environment(&[(
                env_vars::PI_REPL_LLM_BASE_URL,
                "http://127.0.0.1:8000/v1",
            )]))
            .err()
            .unwrap()
            .to_string();
        assert!(error.starts_with(env_vars::PI_REPL_LLM_BASE_URL), "{error}");
    }

    #[test]
    fn malformed_values_are_errors_naming_the_flag_or_variable() {
        let error = |args: &[&str], vars: &[(&str, &str)]| {
            options(args)
                .resolve_with(&environment(vars))
                .err()
                .unwrap()
                .to_string()
        };
        let bad_url = error(&["--llm-model", "m", "--llm-base-url", "ftp://x.test"], &[]);
        assert!(bad_url.starts_with("--llm-base-url"), "{bad_url}");
        let bad_api = error(&[], &[(env_vars::PI_REPL_LLM_API, "gemini")]);
        assert!(bad_api.starts_with("PI_REPL_LLM_API="), "{bad_api}");
        let bad_count = error(&[], &[(env_vars::PI_REPL_LLM_MAX_CALLS, "ten")]);
        assert!(
            bad_count.starts_with("PI_REPL_LLM_MAX_CALLS="),
            "{bad_count}"
        );
        let zero_timeout = error(&[], &[(env_vars::PI_REPL_LLM_TIMEOUT_MS, "0")]);
        assert!(
            zero_timeout.starts_with("PI_REPL_LLM_TIMEOUT_MS=0"),
            "{zero_timeout}"
        );
        let unset_key = error(
            &["--llm-model", "m", "--llm-api-key-env", "NOT_SET_HERE"],
            &[],
        );
        assert!(
            unset_key.starts_with("--llm-api-key-env NOT_SET_HERE: pi-repl's environment has no"),
            "{unset_key}"
        );
        let flag = Command::try_parse_from(["pi-repl", "--llm-api", "gemini"])
            .unwrap_err()
            .to_string();
        assert!(flag.contains("--llm-api"), "{flag}");
    }
}
