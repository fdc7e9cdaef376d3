//! Flags shared by every command that runs a kernel, and how they become an `EngineConfig`.
//!
//! Owns: interpreter acquisition for the CLI (resolve; if nothing is ready, run setup with
//! progress on stderr unless `PI_REPL_AUTO_SETUP=0`; else fall back to `python3`), and reading
//! the engine's environment variables. Flags win over environment variables.

use std::path::PathBuf;

use anyhow::Context;

use super::Failure;
use crate::engine::{
    DEFAULT_ABORT_GRACE, DEFAULT_BOOT_TIMEOUT, DEFAULT_MAX_BINDING_BYTES, DEFAULT_MAX_TOTAL_BYTES,
    DEFAULT_REFRESH, EngineConfig, SAVE_CHILD_LIMIT, SnapshotSettings,
};
use crate::env_vars;
use crate::home::Home;
use crate::interpreter::{self, Interpreter, Resolution, Source};
use crate::kernel::KernelSpec;
use crate::kernel::jupyter_server::ServerSpec;
use crate::kernel_module;
use crate::output::OutputLimits;
use crate::session::Session;
use crate::setup;

#[derive(Debug, Clone, clap::Args)]
pub struct EngineOptions {
    /// Working directory of the kernel [default: the current directory].
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<PathBuf>,

    /// Python interpreter that runs the kernel; overrides PI_REPL_PYTHON and pi-repl's venv.
    #[arg(long, value_name = "PATH")]
    pub python: Option<PathBuf>,

    /// Pass provider credentials (*_API_KEY, *_TOKEN, ...) from this environment to the kernel.
    #[arg(long)]
    pub pass_credentials: bool,

    /// Pass this variable to the kernel even though it looks like a credential (repeatable;
    /// env: PI_REPL_PASS_ENV, comma-separated).
    #[arg(long, value_name = "NAME")]
    pub pass_env: Vec<String>,

    /// Characters of stdout (and of stderr) a cell returns before the middle is cut
    /// [default: 30000; env: PI_REPL_MAX_OUTPUT_CHARS].
    #[arg(long, value_name = "CHARS", value_parser = clap::value_parser!(u64).range(100..))]
    pub max_output: Option<u64>,

    /// Run the kernel on this Jupyter Server (its base URL) instead of on this machine: started
    /// through its REST API, driven over its WebSocket, shut down at exit (docs/remote-kernels.md).
    #[arg(long, value_name = "URL")]
    pub jupyter_url: Option<String>,

    /// The Jupyter Server's token [env: JUPYTER_TOKEN, preferred: an option is visible in the
    /// process list].
    #[arg(
        long,
        value_name = "TOKEN",
        requires = "jupyter_url",
        hide_env_values = true
    )]
    pub jupyter_token: Option<String>,

    /// Attach to this running kernel on the Jupyter Server instead of starting one; it is left
    /// running at exit.
    #[arg(long, value_name = "ID", requires = "jupyter_url")]
    pub kernel_id: Option<String>,

    /// The kernelspec to start on the Jupyter Server [default: python3]. A kernel that does not
    /// run Python runs cells only: no helpers, toolbox or snapshots.
    #[arg(
        long,
        value_name = "NAME",
        requires = "jupyter_url",
        conflicts_with = "kernel_id"
    )]
    pub kernel: Option<String>,
}

impl EngineOptions {
    /// The kernel's working directory: `--cwd` (which must exist) or the current directory.
    pub fn working_dir(&self) -> Result<PathBuf, Failure> {
        match &self.cwd {
            Some(dir) => {
                if !dir.is_dir() {
                    return Err(Failure {
                        error: anyhow::anyhow!("--cwd {}: no such directory", dir.display()),
                        hint: None,
                        exit_code: 2,
                    });
                }
                std::path::absolute(dir)
                    .with_context(|| format!("cannot resolve {}", dir.display()))
                    .map_err(Failure::from)
            }
            None => std::env::current_dir()
                .context("cannot read the current directory")
                .map_err(Failure::from),
        }
    }

    /// The Jupyter Server to run the kernel on, when `--jupyter-url` is given.
    pub fn server_spec(&self) -> Result<Option<ServerSpec>, Failure> {
        let Some(url) = &self.jupyter_url else {
            return Ok(None);
        };
        let token = match &self.jupyter_token {
            Some(token) => Some(token.clone()),
            None => env_vars::text(env_vars::JUPYTER_TOKEN)?,
        };
        ServerSpec::new(url, token, self.kernel_id.clone(), self.kernel.clone())
            .map(Some)
            .map_err(|message| Failure {
                error: anyhow::anyhow!(message),
                hint: Some("pass the server's base URL, e.g. http://127.0.0.1:8888".into()),
                exit_code: 2,
            })
    }

    /// Builds the engine's configuration, creating the Python environment first if needed.
    /// `session` decides where outputs go and whether snapshots are kept.
    pub async fn engine_config(
        &self,
        home: &Home,
        session: &Session,
    ) -> Result<EngineConfig, Failure> {
        let python = acquire_interpreter(self.python.clone(), home).await?;
        self.engine_config_with(home, session, python)
    }

    /// The interpreter, if one is ready without running setup.
    pub fn ready_interpreter(&self, home: &Home) -> Result<Option<Interpreter>, Failure> {
        Ok(match resolve(self.python.as_deref(), home)? {
            Resolution::Found(found) => Some(found),
            Resolution::NeedsSetup { .. } => None,
        })
    }

    /// The engine's configuration with `python` running the kernel (checks every other flag
    /// and variable, quickly).
    pub fn engine_config_with(
        &self,
        home: &Home,
        session: &Session,
        python: Interpreter,
    ) -> Result<EngineConfig, Failure> {
        let output_dir = Some(session.outputs_dir().to_path_buf());
        let remote = self.server_spec()?;
        let mut snapshot = match session.snapshot_dir() {
            Some(dir) => Some(snapshot_settings(home, dir, session.forked_from.clone())?),
            None => None,
        };
        if let (Some(settings), Some(_)) = (&mut snapshot, &remote) {
            // A save child's pid is on the kernel's machine, out of the host's reach.
            settings.fork = false;
            settings.remote_dir =
                env_vars::text(env_vars::PI_REPL_REMOTE_SNAPSHOT_DIR)?.map(PathBuf::from);
        }
        let cwd = self.working_dir()?;
        let module_dir = kernel_module::ensure_unpacked(home)?;
        let pass_credentials = self.pass_credentials
            || env_vars::flag(env_vars::PI_REPL_PASS_CREDENTIALS)?.unwrap_or(false);
        let mut pass_env = self.pass_env.clone();
        if let Some(names) = env_vars::text(env_vars::PI_REPL_PASS_ENV)? {
            pass_env.extend(
                names
                    .split(',')
                    .map(str::trim)
                    .filter(|n| !n.is_empty())
                    .map(String::from),
            );
        }
        let max_chars = match self.max_output {
            Some(chars) => chars as usize,
            None => env_vars::count(env_vars::PI_REPL_MAX_OUTPUT_CHARS)?
                .unwrap_or(crate::output::DEFAULT_MAX_CHARS),
        };
        Ok(EngineConfig {
            kernel: KernelSpec {
                python,
                cwd: cwd.clone(),
                module_dir: module_dir.clone(),
                ipython_dir: home.ipython(),
                pass_credentials,
                pass_env,
                extra_env: Vec::new(),
                withhold: vec![env_vars::JUPYTER_TOKEN.to_string()],
                remote: remote.clone(),
            },
            boot_timeout: env_vars::duration_ms(env_vars::PI_REPL_BOOT_TIMEOUT_MS)?
                .unwrap_or(DEFAULT_BOOT_TIMEOUT),
            abort_grace: env_vars::duration_ms(env_vars::PI_REPL_ABORT_GRACE_MS)?
                .unwrap_or(DEFAULT_ABORT_GRACE),
            silence_timeout: env_vars::duration_ms(env_vars::PI_REPL_TIMEOUT_MS)?
                .filter(|d| !d.is_zero()),
            limits: OutputLimits {
                max_chars,
                ..OutputLimits::default()
            },
            output_dir,
            helpers: crate::helpers::discover(
                &cwd,
                &home.helpers(),
                &kernel_module::toolbox_dir(&module_dir),
            )
            .load_order(),
            snapshot,
            notices: session
                .notice
                .iter()
                .cloned()
                .chain(remote.as_ref().map(remote_notice))
                .collect(),
            // Nobody answers yet: `with_llm` adds a configured endpoint, `mcp` its client.
            llm: Some(crate::llm::kernel_requests::Answerer {
                brokers: crate::llm::Brokers::default(),
                ledger: std::sync::Arc::new(crate::llm::ledger::Ledger::new(
                    crate::llm::ledger::Limits::default(),
                    session.dir.as_deref(),
                )),
            }),
            // Set by the command once its model brokers are known (`cli::agent::supervisor`).
            agents: None,
            host_tools: None,
        })
    }
}

/// What the first result says about a kernel on a Jupyter Server.
fn remote_notice(server: &ServerSpec) -> String {
    let which = match &server.kernel_id {
        Some(id) => format!("attached to kernel {id}, left running at exit"),
        None => "started for this session, shut down at exit".to_string(),
    };
    format!(
        "The kernel runs on the Jupyter Server at {} ({which}). Files, paths and `bash()` are \
         on that server's machine. Not available remotely: ending the processes a cell started \
         when it is interrupted, the kernel's stderr in crash reports, out-of-memory detection, \
         background (forked) snapshot saves. A durable session's snapshots are written on the \
         kernel's machine (under PI_REPL_REMOTE_SNAPSHOT_DIR, else at the session's own paths).",
        server.url
    )
}

/// Snapshot settings for a durable session, from the environment.
fn snapshot_settings(
    home: &Home,
    dir: PathBuf,
    forked_from: Option<String>,
) -> Result<SnapshotSettings, Failure> {
    let mib = |name: &str, default: u64| -> Result<u64, Failure> {
        Ok(env_vars::count(name)?
            .map(|n| n as u64 * 1024 * 1024)
            .unwrap_or(default))
    };
    let refresh = match env_vars::duration_ms(env_vars::PI_REPL_SNAPSHOT_REFRESH_MS)? {
        Some(every) if every.is_zero() => None,
        Some(every) => Some(every),
        None => Some(DEFAULT_REFRESH),
    };
    Ok(SnapshotSettings {
        dir,
        key_file: crate::session::ensure_key(home).map_err(|error| {
            let hint = error
                .downcast_ref::<crate::session::KeyMissing>()
                .map(|missing| missing.hint());
            Failure::new(error, hint)
        })?,
        max_binding_bytes: mib(
            env_vars::PI_REPL_SNAPSHOT_MAX_BINDING_MB,
            DEFAULT_MAX_BINDING_BYTES,
        )?,
        max_total_bytes: mib(
            env_vars::PI_REPL_SNAPSHOT_MAX_TOTAL_MB,
            DEFAULT_MAX_TOTAL_BYTES,
        )?,
        refresh,
        forked_from,
        fork: env_vars::flag(env_vars::PI_REPL_SNAPSHOT_FORK)?.unwrap_or(true),
        child_limit: env_vars::duration_ms(env_vars::PI_REPL_SNAPSHOT_CHILD_LIMIT_MS)?
            .filter(|limit| !limit.is_zero())
            .unwrap_or(SAVE_CHILD_LIMIT),
        remote_dir: None,
    })
}

/// Resolves the interpreter without running setup.
fn resolve(flag: Option<&std::path::Path>, home: &Home) -> Result<Resolution, Failure> {
    interpreter::resolve(flag, home).map_err(|error| Failure {
        error: error.into(),
        hint: Some(
            "pass an existing interpreter, or drop the option to use pi-repl's own environment"
                .into(),
        ),
        exit_code: 2,
    })
}

/// Finds the interpreter, running setup when nothing is ready (unless disabled).
pub async fn acquire_interpreter(
    flag: Option<PathBuf>,
    home: &Home,
) -> Result<Interpreter, Failure> {
    let fallback = match resolve(flag.as_deref(), home)? {
        Resolution::Found(found) => return Ok(found),
        Resolution::NeedsSetup { fallback } => fallback,
    };
    let auto_setup = env_vars::flag(env_vars::PI_REPL_AUTO_SETUP)?.unwrap_or(true);
    if auto_setup {
        let home = home.clone();
        let built = tokio::task::spawn_blocking(move || setup::run(&home, None, false))
            .await
            .context("the setup task failed")?;
        match built {
            Ok(report) => {
                return Ok(Interpreter {
                    path: report.python,
                    source: Source::Venv,
                });
            }
            Err(error) => {
                if let Some(python3) = fallback {
                    tracing::warn!(
                        "could not create pi-repl's environment ({error:#}); trying {}",
                        python3.describe()
                    );
                    return Ok(python3);
                }
                return Err(Failure::new(
                    error.context("pi-repl's Python environment could not be created"),
                    Some("fix the cause above, then run `pi-repl setup`".into()),
                ));
            }
        }
    }
    match fallback {
        Some(python3) => Ok(python3),
        None => Err(Failure::new(
            anyhow::anyhow!(
                "no Python interpreter: pi-repl's environment is not set up and there is no python3 on PATH"
            ),
            Some(format!(
                "run `pi-repl setup` (it is not run automatically because {}=0)",
                env_vars::PI_REPL_AUTO_SETUP
            )),
        )),
    }
}
