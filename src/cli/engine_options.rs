//! The settings of every command that runs a kernel, and how they become an `EngineConfig`.
//!
//! Owns: the engine's settings, each declared once as a field (its flag, its environment
//! variable through clap's `env`, its default, its parser, its doc; a setting that is only a
//! variable has a hidden flag), and interpreter acquisition for the CLI (resolve; if nothing is
//! ready, run setup with progress on stderr unless `PI_REPL_AUTO_SETUP=0`; else fall back to
//! `python3`). A flag wins over its variable; clap reads both once, when the command line is
//! parsed, and a bad value from either is the same `error:`/`hint:` (`values`).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;

use super::{Failure, values};
use crate::agents::Limits as AgentLimits;
use crate::engine::output::OutputLimits;
use crate::engine::{
    DEFAULT_ABORT_GRACE, DEFAULT_BOOT_TIMEOUT, DEFAULT_MAX_BINDING_BYTES, DEFAULT_MAX_TOTAL_BYTES,
    DEFAULT_REFRESH, DEFAULT_REWIND_MAX_BYTES, EngineConfig, SAVE_CHILD_LIMIT, SnapshotSettings,
};
use crate::env_vars;
use crate::home::Home;
use crate::kernel::KernelSpec;
use crate::kernel::jupyter_server::ServerSpec;
use crate::kernel::kernelspecs::{self, Kernelspec};
use crate::python_env::embedded_package;
use crate::python_env::interpreter::{self, Interpreter, Resolution, Source};
use crate::python_env::venv;
use crate::session::Session;

/// The kernel name that means pi-repl's own Python kernel here (Jupyter's name for Python).
const DEFAULT_KERNEL: &str = "python3";

#[derive(Debug, Clone, clap::Args)]
pub struct EngineOptions {
    /// Working directory of the kernel [default: the current directory].
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<PathBuf>,

    #[command(flatten)]
    pub python: PythonOption,

    /// Pass credentials from this environment to the kernel: variables whose name or value
    /// looks like one (*_API_KEY, *_TOKEN, DB_PASS, ghp_..., URLs with a password, ...).
    #[arg(long, env = env_vars::PI_REPL_PASS_CREDENTIALS, value_parser = values::boolean)]
    pub pass_credentials: bool,

    /// Let cells see every process of this user: start a local kernel without its own PID
    /// namespace [env: PI_REPL_PROCESS_ISOLATION=0].
    #[arg(long)]
    pub no_process_isolation: bool,

    /// Start a local kernel in its own PID namespace where Linux allows it (the variable's
    /// side of `--no-process-isolation`).
    #[arg(long, value_name = "BOOL", env = env_vars::PI_REPL_PROCESS_ISOLATION, hide = true,
          value_parser = values::boolean, action = clap::ArgAction::Set,
          default_value_t = true)]
    pub process_isolation: bool,

    /// Pass this variable to the kernel even though it looks like a credential (repeatable;
    /// the variable takes comma-separated names).
    #[arg(long, value_name = "NAME", env = env_vars::PI_REPL_PASS_ENV, value_delimiter = ',')]
    pub pass_env: Vec<String>,

    /// Directories the toolbox's `write` and `edit` may write to besides the working
    /// directory, or `*` for anywhere (passed to the kernel, which enforces it).
    #[arg(long, value_name = "DIRS", env = env_vars::PI_REPL_ALLOW_WRITE, hide = true,
          value_delimiter = ':')]
    pub allow_write: Vec<String>,

    /// Characters of stdout (and of stderr) a cell returns before the middle is cut.
    #[arg(long, value_name = "CHARS", env = env_vars::PI_REPL_MAX_OUTPUT_CHARS,
          value_parser = values::at_least(100),
          default_value_t = crate::engine::output::DEFAULT_MAX_CHARS as u64)]
    pub max_output: u64,

    /// Run the kernel on this Jupyter Server (its base URL) instead of on this machine: started
    /// through its REST API, driven over its WebSocket, shut down at exit (docs/remote-kernels.md).
    #[arg(long, value_name = "URL")]
    pub jupyter_url: Option<String>,

    /// The Jupyter Server's token (the variable is preferred: an option is visible in the
    /// process list).
    // Needs --jupyter-url, checked by `cli::parse`: clap's `requires` would also refuse a
    // JUPYTER_TOKEN set for other programs.
    #[arg(long, value_name = "TOKEN", env = env_vars::JUPYTER_TOKEN, hide_env_values = true)]
    pub jupyter_token: Option<String>,

    /// Attach to this running kernel on the Jupyter Server instead of starting one; it is left
    /// running at exit.
    // Needs --jupyter-url, checked by `cli::parse`: clap's `requires` is not met by a URL from a
    // configuration file (a default, to clap).
    #[arg(long, value_name = "ID")]
    pub kernel_id: Option<String>,

    /// The kernelspec to run: with --jupyter-url one of the server's [default: python3], else
    /// one installed here (pi-repl's own Jupyter path, then Jupyter's; `python3` is pi-repl's
    /// own kernel, the default). A kernel that does not run Python runs cells only: no helpers,
    /// toolbox or snapshots (docs/kernelspecs.md).
    #[arg(long, value_name = "NAME", conflicts_with = "kernel_id")]
    pub kernel: Option<String>,

    #[command(flatten)]
    pub auto_setup: AutoSetup,

    /// Write the session as a Jupyter notebook to this file, rewritten after every cell
    /// [default: notebook.ipynb in a durable session's directory; none for an ephemeral one]
    /// (docs/notebook.md).
    #[arg(long, value_name = "FILE")]
    pub notebook: Option<PathBuf>,

    // Settings that are variables only (their flags are hidden); documented in
    // docs/configuration.md and src/env_vars.rs.
    /// How long a kernel may take to boot and answer `kernel_info`.
    #[arg(long, value_name = "MS", env = env_vars::PI_REPL_BOOT_TIMEOUT_MS, hide = true,
          value_parser = values::millis,
          default_value_t = DEFAULT_BOOT_TIMEOUT.as_millis() as u64)]
    pub boot_timeout_ms: u64,

    /// Silence watchdog: interrupt a cell that prints nothing for this long; 0 is off.
    #[arg(long, value_name = "MS", env = env_vars::PI_REPL_TIMEOUT_MS, hide = true,
          value_parser = values::millis, default_value_t = 0)]
    pub silence_timeout_ms: u64,

    /// How long an interrupted cell may keep running before its kernel is killed.
    #[arg(long, value_name = "MS", env = env_vars::PI_REPL_ABORT_GRACE_MS, hide = true,
          value_parser = values::millis,
          default_value_t = DEFAULT_ABORT_GRACE.as_millis() as u64)]
    pub abort_grace_ms: u64,

    /// Largest stored size of one binding in a snapshot, in MiB.
    #[arg(long, value_name = "MIB", env = env_vars::PI_REPL_SNAPSHOT_MAX_BINDING_MB,
          hide = true, value_parser = values::positive,
          default_value_t = DEFAULT_MAX_BINDING_BYTES / MIB)]
    pub snapshot_max_binding_mb: u64,

    /// Largest stored size of a whole snapshot, in MiB.
    #[arg(long, value_name = "MIB", env = env_vars::PI_REPL_SNAPSHOT_MAX_TOTAL_MB, hide = true,
          value_parser = values::positive, default_value_t = DEFAULT_MAX_TOTAL_BYTES / MIB)]
    pub snapshot_max_total_mb: u64,

    /// Interval of the periodic snapshot refresh; 0 disables it.
    #[arg(long, value_name = "MS", env = env_vars::PI_REPL_SNAPSHOT_REFRESH_MS, hide = true,
          value_parser = values::millis, default_value_t = DEFAULT_REFRESH.as_millis() as u64)]
    pub snapshot_refresh_ms: u64,

    /// Save background snapshots in a forked child of the kernel (else in the kernel).
    #[arg(long, value_name = "BOOL", env = env_vars::PI_REPL_SNAPSHOT_FORK, hide = true,
          value_parser = values::boolean, action = clap::ArgAction::Set,
          default_value_t = true)]
    pub snapshot_fork: bool,

    /// Start the kernel with its heap on transparent huge pages (glibc's tunable): a fork for a
    /// save copies far fewer page tables.
    #[arg(long, value_name = "BOOL", env = env_vars::PI_REPL_HUGE_PAGES, hide = true,
          value_parser = values::boolean, action = clap::ArgAction::Set,
          default_value_t = true)]
    pub huge_pages: bool,

    /// At a revive, reinstall the packages the session added that the environment lacks (else
    /// the reset notice names them).
    #[arg(long, value_name = "BOOL", env = env_vars::PI_REPL_REINSTALL_PACKAGES, hide = true,
          value_parser = values::boolean, action = clap::ArgAction::Set,
          default_value_t = true)]
    pub reinstall_packages: bool,

    /// How long a snapshot save child may run before it is killed; 0 is the default.
    #[arg(long, value_name = "MS", env = env_vars::PI_REPL_SNAPSHOT_CHILD_LIMIT_MS,
          hide = true, value_parser = values::millis,
          default_value_t = SAVE_CHILD_LIMIT.as_millis() as u64)]
    pub snapshot_child_limit_ms: u64,

    /// Largest size, in MiB, the kept states of answered cells (for a rewind) may take beyond
    /// the current snapshot; the newest 100 are kept at most.
    #[arg(long, value_name = "MIB", env = env_vars::PI_REPL_REWIND_MAX_MB, hide = true,
          value_parser = values::whole, default_value_t = DEFAULT_REWIND_MAX_BYTES / MIB)]
    pub rewind_max_mb: u64,

    /// With --jupyter-url: where durable sessions keep their snapshots on the kernel's machine.
    #[arg(long, value_name = "DIR", env = env_vars::PI_REPL_REMOTE_SNAPSHOT_DIR, hide = true)]
    pub remote_snapshot_dir: Option<PathBuf>,

    /// How deep sub-agents may nest.
    #[arg(long, value_name = "N", env = env_vars::PI_REPL_AGENT_MAX_DEPTH, hide = true,
          value_parser = values::positive, default_value_t = crate::agents::DEFAULT_MAX_DEPTH as u64)]
    pub agent_max_depth: u64,

    /// Sub-agents one workspace may have running at once.
    #[arg(long, value_name = "N", env = env_vars::PI_REPL_AGENT_MAX_RUNNING, hide = true,
          value_parser = values::positive,
          default_value_t = crate::agents::DEFAULT_MAX_RUNNING as u64)]
    pub agent_max_running: u64,
}

/// The interpreter the user names, by flag or by variable.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct PythonOption {
    /// Python interpreter that runs the kernel, instead of pi-repl's venv.
    #[arg(long = "python", id = "python", value_name = "PATH", env = env_vars::PI_REPL_PYTHON)]
    pub path: Option<PathBuf>,

    /// Whether `path` came from PI_REPL_PYTHON (messages name where it came from); set by
    /// `cli::parse` from clap's value source.
    #[arg(skip)]
    pub from_variable: bool,
}

impl PythonOption {
    /// The named interpreter and where it was named, if any.
    pub fn named(&self) -> Option<(&std::path::Path, Source)> {
        let source = if self.from_variable {
            Source::EnvVar
        } else {
            Source::Flag
        };
        self.path.as_deref().map(|path| (path, source))
    }
}

/// Bytes in a MiB, the unit of the snapshot limits.
const MIB: u64 = 1024 * 1024;

/// Whether a command that needs pi-repl's venv builds it when it is missing.
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct AutoSetup {
    /// Create pi-repl's venv when it is missing (else fail with a hint to run `pi-repl setup`).
    #[arg(long = "auto-setup", value_name = "BOOL", env = env_vars::PI_REPL_AUTO_SETUP,
          hide = true, value_parser = values::boolean, action = clap::ArgAction::Set,
          default_value_t = true)]
    pub enabled: bool,
}

impl EngineOptions {
    /// The kernel's working directory: `--cwd` (which must exist) or the current directory.
    pub fn working_dir(&self) -> Result<PathBuf, Failure> {
        match &self.cwd {
            Some(dir) => {
                if !dir.is_dir() {
                    return Err(Failure::usage(
                        anyhow::anyhow!("--cwd {}: no such directory", dir.display()),
                        None,
                    ));
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
        let token = self
            .jupyter_token
            .clone()
            .filter(|token| !token.trim().is_empty());
        ServerSpec::new(url, token, self.kernel_id.clone(), self.kernel.clone())
            .map(Some)
            .map_err(|message| {
                Failure::usage(
                    anyhow::anyhow!(message),
                    Some("pass the server's base URL, e.g. http://127.0.0.1:8888".into()),
                )
            })
    }

    /// The installed kernelspec `--kernel NAME` selects on this machine; `None` for pi-repl's
    /// own kernel (no `--kernel`, or `python3`) and for a kernel on a Jupyter Server.
    pub fn local_kernelspec(&self, home: &Home) -> Result<Option<Kernelspec>, Failure> {
        let Some(name) = &self.kernel else {
            return Ok(None);
        };
        if self.jupyter_url.is_some() || name == DEFAULT_KERNEL {
            return Ok(None);
        }
        kernelspecs::find(name, &kernelspecs::search_path(home))
            .map(Some)
            .map_err(|error| {
                let hint = error.hint();
                Failure::usage(error, Some(hint))
            })
    }

    /// True when `--kernel` selects a local kernelspec that is not Python: no interpreter is
    /// needed (nor pi-repl's environment built) to run it.
    pub fn runs_without_python(&self, home: &Home) -> Result<bool, Failure> {
        Ok(self
            .local_kernelspec(home)?
            .is_some_and(|kernelspec| !kernelspec.is_python()))
    }

    /// Builds the engine's configuration, creating the Python environment first if needed.
    /// `session` decides where outputs go and whether snapshots are kept.
    pub async fn engine_config(
        &self,
        home: &Home,
        session: &Session,
    ) -> Result<EngineConfig, Failure> {
        let python = if self.runs_without_python(home)? {
            placeholder_interpreter(home)
        } else {
            acquire_interpreter(&self.python, self.auto_setup, home).await?
        };
        self.engine_config_with(home, session, python)
    }

    /// The interpreter, if one is ready without running setup.
    pub fn ready_interpreter(&self, home: &Home) -> Result<Option<Interpreter>, Failure> {
        Ok(match resolve(self.python.named(), home)? {
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
        let kernelspec = self.local_kernelspec(home)?;
        let mut snapshot = match session.snapshot_dir() {
            Some(dir) => Some(self.snapshot_settings(home, dir, session.forked_from.clone())?),
            None => None,
        };
        if let (Some(settings), Some(_)) = (&mut snapshot, &remote) {
            // A save child's pid is on the kernel's machine, out of the host's reach.
            settings.fork = false;
            settings.remote_dir = self.remote_snapshot_dir.clone();
        }
        let cwd = self.working_dir()?;
        let module_dir = embedded_package::ensure_unpacked(home)?;
        let pass_env = self.pass_env_names();
        // Told once, to the first cell: a local kernel's environment only (a remote kernel has
        // its server's).
        let withheld = remote
            .is_none()
            .then(|| crate::kernel::withheld_notice(&self.withheld_credentials()))
            .flatten();
        Ok(EngineConfig {
            kernel: KernelSpec {
                python,
                cwd: cwd.clone(),
                module_dir: module_dir.clone(),
                ipython_dir: home.ipython(),
                pass_credentials: self.pass_credentials,
                pass_env,
                // The kernel's toolbox reads it; from a flag or a file it is not in the
                // environment the kernel inherits.
                extra_env: (!self.allow_write.is_empty())
                    .then(|| {
                        (
                            env_vars::PI_REPL_ALLOW_WRITE.to_string(),
                            self.allow_write.join(":"),
                        )
                    })
                    .into_iter()
                    .collect(),
                withhold: vec![env_vars::JUPYTER_TOKEN.to_string()],
                isolate_processes: self.process_isolation && !self.no_process_isolation,
                huge_pages: self.huge_pages,
                remote: remote.clone(),
                kernelspec,
            },
            boot_timeout: Duration::from_millis(self.boot_timeout_ms),
            abort_grace: Duration::from_millis(self.abort_grace_ms),
            silence_timeout: Some(Duration::from_millis(self.silence_timeout_ms))
                .filter(|d| !d.is_zero()),
            limits: OutputLimits {
                max_chars: self.max_output as usize,
                ..OutputLimits::default()
            },
            output_dir,
            helpers: crate::helpers::discover(
                &cwd,
                &home.helpers(),
                &embedded_package::toolbox_dir(&module_dir),
            )
            .load_order(),
            snapshot,
            notices: session
                .notice
                .iter()
                .cloned()
                .chain(remote.as_ref().map(remote_notice))
                .chain(withheld)
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
            // No client to run them: a cell is told host tools exist only under pi (`mcp`
            // replaces it with the one its client connects).
            host_tools: Some(super::stdin_services::host_tools(
                crate::host_tools::HostTools::new(),
            )),
            notebook: self.notebook_path(session),
            attach_file: session
                .dir
                .as_ref()
                .map(|dir| dir.join(crate::engine::ATTACH_FILE)),
            live_fork: None,
        })
    }

    /// The live notebook: `--notebook`, else the durable session's own.
    fn notebook_path(&self, session: &Session) -> Option<PathBuf> {
        match &self.notebook {
            Some(path) => std::path::absolute(path)
                .ok()
                .or_else(|| Some(path.clone())),
            None => session
                .dir
                .as_ref()
                .map(|dir| dir.join(crate::engine::notebook::SESSION_NOTEBOOK)),
        }
    }

    /// The names of `--pass-env` (or `PI_REPL_PASS_ENV`).
    fn pass_env_names(&self) -> Vec<String> {
        self.pass_env
            .iter()
            .map(|name| name.trim())
            .filter(|name| !name.is_empty())
            .map(String::from)
            .collect()
    }

    /// The variables of this process's environment that a local kernel will not get as
    /// credentials (names and rules). pi-repl's own (`PI_REPL_*`, such as its model endpoint's
    /// key `PI_REPL_LLM_API_KEY`) count as the host's: withheld, but no notice names them.
    pub fn withheld_credentials(&self) -> Vec<crate::kernel::Withheld> {
        let (_, mut withheld) = crate::kernel::kernel_environment(
            std::env::vars_os(),
            self.pass_credentials,
            &self.pass_env_names(),
            &[],
        );
        for variable in &mut withheld {
            if variable.name.starts_with("PI_REPL_") {
                variable.why = crate::kernel::secrets::Why::HostOwn;
            }
        }
        withheld
    }

    /// The limits of this workspace's sub-agents.
    pub fn agent_limits(&self) -> AgentLimits {
        AgentLimits {
            max_depth: u32::try_from(self.agent_max_depth).unwrap_or(u32::MAX),
            max_running: usize::try_from(self.agent_max_running).unwrap_or(usize::MAX),
        }
    }

    /// Snapshot settings for a durable session whose snapshots live in `dir`.
    fn snapshot_settings(
        &self,
        home: &Home,
        dir: PathBuf,
        forked_from: Option<String>,
    ) -> Result<SnapshotSettings, Failure> {
        Ok(SnapshotSettings {
            dir,
            // A missing or unusable key is not a stop: the engine says it in the first result
            // and saves nothing (`session::KeyProblem`).
            key_file: crate::session::ensure_key(home)
                .map_err(|error| Failure::new(error, None))?,
            max_binding_bytes: self.snapshot_max_binding_mb.saturating_mul(MIB),
            max_total_bytes: self.snapshot_max_total_mb.saturating_mul(MIB),
            refresh: Some(Duration::from_millis(self.snapshot_refresh_ms))
                .filter(|every| !every.is_zero()),
            forked_from,
            fork: self.snapshot_fork,
            reinstall_packages: self.reinstall_packages,
            child_limit: Some(Duration::from_millis(self.snapshot_child_limit_ms))
                .filter(|limit| !limit.is_zero())
                .unwrap_or(SAVE_CHILD_LIMIT),
            remote_dir: None,
            rewind_max_bytes: self.rewind_max_mb.saturating_mul(MIB),
        })
    }
}

/// The interpreter named in a configuration whose kernel needs none (a kernelspec of another
/// language runs the kernel): pi-repl's venv's, which is never started.
pub fn placeholder_interpreter(home: &Home) -> Interpreter {
    Interpreter {
        path: venv::venv_python(home),
        source: Source::Venv,
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

/// Resolves the interpreter without running setup.
fn resolve(named: Option<(&std::path::Path, Source)>, home: &Home) -> Result<Resolution, Failure> {
    interpreter::resolve(named, home).map_err(|error| {
        Failure::usage(
            error,
            Some(
                "pass an existing interpreter, or drop the option to use pi-repl's own environment"
                    .into(),
            ),
        )
    })
}

/// Finds the interpreter, running setup when nothing is ready (unless disabled).
pub async fn acquire_interpreter(
    python: &PythonOption,
    auto_setup: AutoSetup,
    home: &Home,
) -> Result<Interpreter, Failure> {
    let fallback = match resolve(python.named(), home)? {
        Resolution::Found(found) => return Ok(found),
        Resolution::NeedsSetup { fallback } => fallback,
    };
    if auto_setup.enabled {
        let home = home.clone();
        let built = tokio::task::spawn_blocking(move || venv::run(&home, None, false))
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
