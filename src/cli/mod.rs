//! The `pi-repl` command line.
//!
//! Owns: argument parsing (clap), logging setup, and the one place errors become exit codes and
//! `error:`/`hint:` text. stdout carries data only; progress, logs and errors go to stderr.
//!
//! Settings: every setting is one field of a command's options (`*_options.rs`, `mcp.rs`),
//! declaring its flag, its environment variable (clap's `env`), its default, its parser
//! (`values`) and its doc. [`parse`] reads the command line and those variables once; a bad
//! value from either is the same `error:`/`hint:` (`values::BadValue`). The configuration
//! files (`crate::config`) give those fields their defaults before the command line is read,
//! so a flag wins over its variable, and a variable over the files. How to add one:
//! `docs/configuration.md`.
//!
//! Exit codes: the [`Exit`] enum (`exit.rs`), tabled in `docs/cli.md`.

mod agent;
mod agent_loop;
mod attach;
mod config;
mod doctor;
mod engine_options;
mod exec;
mod exit;
mod helpers;
mod llm_options;
mod mcp;
mod printer;
mod session_options;
mod sessions;
mod setup;
mod stdin_services;
pub mod stdout;
pub(crate) mod values;

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

pub use engine_options::EngineOptions;
pub use exit::Exit;
pub use llm_options::LlmOptions;
pub use session_options::SessionOptions;

#[derive(Debug, Parser)]
#[command(
    name = "pi-repl",
    version,
    about = "A persistent Python workspace for AI agents: one `execute` tool over a real ipykernel.",
    after_help = "Files live under PI_REPL_HOME (default ~/.pi/agent/pi-repl). \
                  Settings: flags, environment variables, ~/.pi/agent/pi-repl.toml and a \
                  project's .pi/pi-repl.toml (`pi-repl config`, docs/configuration.md)."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// A sub-agent started by a parent pi-repl for a cell's `spawn_agent` (not for direct use).
    #[command(hide = true)]
    Agent(agent::AgentArgs),
    /// Open a console on the live kernel of a running session (prints its connection file).
    Attach(attach::AttachArgs),
    /// Show the settings a command runs with, and where each comes from (flag, variable,
    /// project file, user file, default).
    Config(config::ConfigArgs),
    /// Check the interpreter, the kernel, the helpers and pi-repl's files; say what to fix.
    Doctor(doctor::DoctorArgs),
    /// Run Python cells in one fresh kernel, in order, and print what they produce.
    Exec(exec::ExecArgs),
    /// List the helper files a session would load here, from where, and what shadows what.
    #[command(mut_arg("python", |arg| arg.help(
        "Python interpreter used to read the files (any Python 3 works)"
    )))]
    Helpers(helpers::HelpersArgs),
    /// Serve the `execute` tool over MCP on stdin/stdout (for Claude Code, Codex, Cursor, pi, ...).
    Mcp(mcp::McpArgs),
    /// List sessions, show a session's saved bindings, remove or prune sessions.
    Sessions(sessions::SessionsArgs),
    /// Create or update pi-repl's Python environment (PI_REPL_HOME/venv).
    Setup(setup::SetupArgs),
}

impl Command {
    /// The interpreter option of a command that has one.
    fn python_mut(&mut self) -> Option<&mut engine_options::PythonOption> {
        match self {
            Command::Agent(args) => Some(&mut args.engine.python),
            Command::Doctor(args) => Some(&mut args.engine.python),
            Command::Exec(args) => Some(&mut args.engine.python),
            Command::Helpers(args) => Some(&mut args.python),
            Command::Mcp(args) => Some(&mut args.engine.python),
            Command::Attach(_) | Command::Config(_) | Command::Sessions(_) | Command::Setup(_) => {
                None
            }
        }
    }
}

/// A failure with the exit code and advice that go with it.
#[derive(Debug)]
pub struct Failure {
    pub error: anyhow::Error,
    pub hint: Option<String>,
    pub exit: Exit,
}

impl Failure {
    /// pi-repl itself could not do its work ([`Exit::Failure`]).
    pub fn new(error: impl Into<anyhow::Error>, hint: Option<String>) -> Failure {
        Failure {
            error: error.into(),
            hint,
            exit: Exit::Failure,
        }
    }

    /// The command was called wrongly ([`Exit::Usage`]).
    pub fn usage(error: impl Into<anyhow::Error>, hint: Option<String>) -> Failure {
        Failure {
            error: error.into(),
            hint,
            exit: Exit::Usage,
        }
    }
}

impl From<anyhow::Error> for Failure {
    fn from(error: anyhow::Error) -> Failure {
        Failure::new(error, None)
    }
}

/// Runs the command line and returns the process exit code.
pub fn main() -> ExitCode {
    let cli = match parse() {
        Ok(cli) => cli,
        Err(failure) => {
            report(&failure);
            return failure.exit.into();
        }
    };
    init_logging();
    keep_environment_private();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            report(&Failure::new(error, None));
            return Exit::Failure.into();
        }
    };
    let result = runtime.block_on(async move {
        match cli.command {
            Command::Agent(args) => agent::run(args).await,
            Command::Attach(args) => attach::run(args).await,
            Command::Config(args) => config::run(args).await,
            Command::Doctor(args) => doctor::run(args).await,
            Command::Exec(args) => exec::run(args).await,
            Command::Helpers(args) => helpers::run(args).await,
            Command::Mcp(args) => mcp::run(args).await,
            Command::Sessions(args) => sessions::run(args).await,
            Command::Setup(args) => setup::run(args).await,
        }
    });
    // Everything that matters has finished (the engine is shut down, output written). A read of
    // stdin parked on a blocking thread (the MCP server's, after a stop signal) would keep a
    // graceful runtime shutdown waiting for its whole grace: do not wait for it.
    runtime.shutdown_background();
    match result {
        // Its reader went away (`| head`): quietly, with the broken pipe's conventional code.
        Ok(_) if stdout::is_closed() => Exit::StdoutClosed.into(),
        Ok(exit) => exit.into(),
        Err(failure) => {
            report(&failure);
            failure.exit.into()
        }
    }
}

/// Reads the command line and every setting's environment variable, once. A malformed value,
/// from a flag or from a variable, is a [`values::BadValue`]; every other problem (an unknown
/// flag, `--help`, `--version`) is clap's to print, and exits.
fn parse() -> Result<Cli, Failure> {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let is = |name: &str| args.get(1).is_some_and(|arg| arg == name);
    // `setup` and `sessions` read no configuration: a broken file never stops them.
    let reads = READS_CONFIGURATION.iter().any(|name| is(name)) || is("config");
    let (command, loaded) = if reads {
        configured(&args)
    } else {
        (values::prepare(Cli::command()), Default::default())
    };
    // `doctor` lists the files' problems and runs without the files that have one.
    if !is("doctor") {
        if let Some(problem) = loaded.problems.first() {
            return Err(problem_failure(problem));
        }
        if !is("config") {
            for note in &loaded.notes {
                crate::stderr_line!("warning: {note}");
            }
        }
    }
    let matches = match command.clone().try_get_matches_from(&args) {
        Ok(matches) => matches,
        Err(error) => match values::BadValue::from_clap(&error, &command, &args) {
            Some(bad) => return Err(bad.into_failure()),
            None => error.exit(),
        },
    };
    requirements(&matches)?;
    let mut cli = Cli::from_arg_matches(&matches).unwrap_or_else(|error| error.exit());
    if let Some((_, command)) = matches.subcommand()
        && command.try_contains_id("python").unwrap_or(false)
        && command.value_source("python") == Some(clap::parser::ValueSource::EnvVariable)
        && let Some(python) = cli.command.python_mut()
    {
        python.from_variable = true;
    }
    if let Command::Doctor(args) = &mut cli.command {
        args.configuration = loaded;
    }
    Ok(cli)
}

/// What clap's `requires` cannot say, because a value from a configuration file is a default
/// to clap: `--jupyter-token` and `--kernel-id` given as flags need a Jupyter Server URL (from
/// a flag, a file or its own default: none).
fn requirements(matches: &clap::ArgMatches) -> Result<(), Failure> {
    if let Some((_, command)) = matches.subcommand()
        && command.try_contains_id("jupyter_token").unwrap_or(false)
        && command.value_source("jupyter_token") == Some(clap::parser::ValueSource::CommandLine)
        && !command.contains_id("jupyter_url")
    {
        return Err(Failure::usage(
            anyhow::anyhow!("--jupyter-token is given without --jupyter-url"),
            Some("add --jupyter-url URL, the Jupyter Server's base URL".into()),
        ));
    }
    if let Some((_, command)) = matches.subcommand()
        && command.try_contains_id("kernel_id").unwrap_or(false)
        && command.value_source("kernel_id") == Some(clap::parser::ValueSource::CommandLine)
        && !command.contains_id("jupyter_url")
    {
        return Err(Failure::usage(
            anyhow::anyhow!("--kernel-id is given without --jupyter-url"),
            Some("add --jupyter-url URL, the Jupyter Server the kernel runs on".into()),
        ));
    }
    Ok(())
}

/// The commands that read the configuration files. The options of the others are not
/// settings (`setup --python` names the interpreter that builds the venv, not the kernel's).
pub const READS_CONFIGURATION: &[&str] = &["agent", "doctor", "exec", "helpers", "mcp"];

/// The command line's definition, prepared (`values::prepare`) and given the configuration
/// files' values as defaults, and the files as read for the command line `args` (the project
/// file is looked for from its `--cwd`, else the current directory).
fn configured(args: &[std::ffi::OsString]) -> (clap::Command, crate::config::Loaded) {
    let keys = crate::config::Keys::of(&Cli::command(), READS_CONFIGURATION);
    let command = values::prepare(Cli::command());
    let loaded = crate::config::load(&keys, &working_dir_of(&command, args));
    let command = crate::config::apply(command, &loaded, &keys);
    (command, loaded)
}

/// The every-setting keys of the commands that read the configuration.
pub fn keys() -> crate::config::Keys {
    crate::config::Keys::of(&Cli::command(), READS_CONFIGURATION)
}

/// The working directory the command line `args` names (`--cwd`), else the current one.
fn working_dir_of(command: &clap::Command, args: &[std::ffi::OsString]) -> std::path::PathBuf {
    let current = std::env::current_dir().unwrap_or_default();
    let named = command
        .clone()
        .ignore_errors(true)
        .try_get_matches_from(args)
        .ok()
        .and_then(|matches| {
            let (_, sub) = matches.subcommand()?;
            sub.try_get_one::<std::path::PathBuf>("cwd")
                .ok()
                .flatten()
                .cloned()
        });
    match named {
        Some(dir) => current.join(dir),
        None => current,
    }
}

/// A configuration file's problem as the failure it is: exit code 2.
fn problem_failure(problem: &crate::config::Problem) -> Failure {
    Failure::usage(anyhow::anyhow!("{problem}"), Some(problem.hint.clone()))
}

/// Prints a failure as `error:` / `Caused by:` / `hint:` on stderr.
pub fn report(failure: &Failure) {
    let mut chain = failure.error.chain();
    if let Some(first) = chain.next() {
        crate::stderr_line!("error: {first}");
    }
    for cause in chain {
        crate::stderr_line!("  Caused by: {cause}");
    }
    if let Some(hint) = &failure.hint {
        crate::stderr_line!("hint: {hint}");
    }
}

/// Makes this process non-dumpable, so that another process of the same user (a cell, or
/// anything a cell starts) cannot read `/proc/<pid>/environ`, the host's environment with the
/// credentials the kernel's environment leaves out, or attach to it. Kernels are not affected:
/// `execve` resets the attribute. Costs core dumps of pi-repl itself.
fn keep_environment_private() {
    if let Err(error) = nix::sys::prctl::set_dumpable(false) {
        tracing::warn!(%error, "cannot make pi-repl non-dumpable; a cell could read its environment");
    }
}

fn init_logging() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env(crate::env_vars::PI_REPL_LOG)
        // zeromq logs every failed reconnect to a kernel that has died; the engine reports the
        // death itself.
        // rmcp logs every error response it sends (an unknown tool, bad arguments); those are
        // the client's to read, not operator warnings.
        .unwrap_or_else(|_| EnvFilter::new("warn,zeromq=error,rmcp=error"));
    // A second initialisation (tests calling main twice) is harmless.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .without_time()
        .with_target(false)
        .try_init();
}
