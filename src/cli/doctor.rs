//! `pi-repl doctor`: checks everything a session needs and says what to fix.
//!
//! Checks, in order: the interpreter (which one, and why), that a kernel starts with it (and
//! how long it takes), whether its cells see only its own processes (a PID namespace of its
//! own, docs/security.md; a warning where Linux does not allow it), that every helper loads,
//! which variables of this environment the kernel does not get as credentials (names and rules,
//! never a value), that pi-repl's files are private, and the configuration files (each file
//! read, each problem with its file, line and fix: the other commands stop at one). Exit code
//! 0 when everything passed, 1 otherwise.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use super::{Exit, Failure};
use crate::engine::{CellOptions, Engine};
use crate::home::Home;
use crate::python_env::interpreter::{self, Resolution};

#[derive(Debug, clap::Args)]
pub struct DoctorArgs {
    #[command(flatten)]
    pub engine: super::EngineOptions,

    /// The configuration files as read (`cli::parse`): their problems are listed here instead
    /// of stopping the command.
    #[arg(skip)]
    pub configuration: crate::config::Loaded,
}

struct Report {
    problems: usize,
}

impl Report {
    fn ok(&mut self, what: &str) {
        super::stdout::line(format_args!("ok    {what}"));
    }

    fn problem(&mut self, what: &str, fix: &str) {
        self.problems += 1;
        super::stdout::line(format_args!("FAIL  {what}\n      fix: {fix}"));
    }

    fn warn(&mut self, what: &str, why: &str) {
        super::stdout::line(format_args!("warn  {what}\n      why: {why}"));
    }

    fn note(&mut self, what: &str) {
        super::stdout::line(format_args!("      {what}"));
    }
}

pub async fn run(args: DoctorArgs) -> Result<Exit, Failure> {
    let home = Home::from_env()?;
    let mut report = Report { problems: 0 };
    super::stdout::line(format_args!(
        "pi-repl {} — PI_REPL_HOME is {}",
        env!("CARGO_PKG_VERSION"),
        home.root().display()
    ));

    match interpreter::resolve(args.engine.python.named(), &home) {
        Ok(Resolution::Found(found)) => report.ok(&format!("interpreter: {}", found.describe())),
        Ok(Resolution::NeedsSetup { fallback }) => report.problem(
            &format!(
                "pi-repl's Python environment is not set up{}",
                fallback
                    .map(|f| format!(" (it would fall back to {})", f.describe()))
                    .unwrap_or_default()
            ),
            "run `pi-repl setup`",
        ),
        Err(error) => report.problem(
            &error.to_string(),
            "pass an existing interpreter with --python",
        ),
    }

    check_configuration(&args.configuration, &mut report);
    check_kernel(&args, &home, &mut report).await;
    check_credentials(&args, &mut report);
    check_permissions(&home, &mut report);

    if report.problems == 0 {
        super::stdout::line(format_args!("\nall checks passed"));
        Ok(Exit::Success)
    } else {
        super::stdout::line(format_args!("\n{} problem(s) found", report.problems));
        Ok(Exit::ProblemsFound)
    }
}

fn check_configuration(loaded: &crate::config::Loaded, report: &mut Report) {
    for file in loaded
        .files
        .iter()
        .filter(|file| file.found && !file.refused)
    {
        report.ok(&format!(
            "configuration: {} {}",
            file.layer.describe(),
            file.path.display()
        ));
    }
    for problem in &loaded.problems {
        report.problem(
            &format!("configuration: {problem} (the file is not used)"),
            &problem.hint,
        );
    }
    for note in &loaded.notes {
        report.warn(
            &format!("configuration: {note}"),
            "pi-repl reads the reference design's pythonPath and timeoutMs only",
        );
    }
}

async fn check_kernel(args: &DoctorArgs, home: &Home, report: &mut Report) {
    let ephemeral = match crate::session::open(home, Path::new("."), &Default::default()) {
        Ok(session) => session,
        Err(error) => {
            report.problem(&format!("{error:#}"), "see the error above");
            return;
        }
    };
    let config = match args.engine.engine_config(home, &ephemeral).await {
        Ok(config) => config,
        Err(failure) => {
            report.problem(
                &format!("cannot prepare a kernel: {:#}", failure.error),
                failure.hint.as_deref().unwrap_or("see the error above"),
            );
            return;
        }
    };
    let helper_count = config.helpers.len();
    let other_language = config
        .kernel
        .kernelspec
        .as_ref()
        .filter(|kernelspec| !kernelspec.is_python())
        .map(|kernelspec| (kernelspec.name.clone(), kernelspec.language.clone()));
    let started = Instant::now();
    let engine = Engine::start(config);
    // A kernelspec of another language (`--kernel deno`) gets a probe most languages read.
    let other = other_language.map(|(name, language)| format!("`{name}` ({language}), 1 + 1 = "));
    let probe = match &other {
        Some(_) => "1 + 1",
        None => {
            "import sys, ipykernel\nf'Python {sys.version.split()[0]}, ipykernel {ipykernel.__version__}'"
        }
    };
    match engine.submit(probe, CellOptions::default()).outcome().await {
        Ok(outcome) if outcome.result.is_some() => report.ok(&format!(
            "kernel starts and runs a cell in {} ms ({}{})",
            started.elapsed().as_millis(),
            other.unwrap_or_default(),
            outcome.result.unwrap_or_default().trim_matches('\'')
        )),
        Ok(outcome) => report.problem(
            &format!(
                "the kernel ran the probe cell badly: {}",
                outcome
                    .error
                    .map(|e| format!("{}: {}", e.ename, e.evalue))
                    .unwrap_or_default()
            ),
            "run `pi-repl setup --force` to rebuild the environment",
        ),
        Err(error) => report.problem(
            &format!("the kernel does not start: {error}"),
            &error.hint().unwrap_or_else(|| "see the error above".into()),
        ),
    }
    check_isolation(&engine, args, report).await;
    if other_language_kernel(args).is_none() {
        check_shell_python(&engine, report).await;
    }
    match engine.helpers(Duration::from_secs(5)).await {
        Some(records) => {
            let mut loaded = 0;
            for record in records.iter() {
                match record.failure_line() {
                    Some(line) => report.problem(
                        &line,
                        "fix the file, or rename it to start with `_` to skip it",
                    ),
                    None => {
                        loaded += 1;
                        for function in &record.functions {
                            report.note(&format!(
                                "{}{}  ({})",
                                function.name,
                                function.signature.as_deref().unwrap_or(""),
                                record.file
                            ));
                        }
                    }
                }
            }
            let line = format!("{loaded} of {helper_count} helper files load");
            if loaded == helper_count {
                report.ok(&line);
            }
        }
        None => report.note("helpers were not checked: no kernel"),
    }
    engine.shutdown().await;
}

/// A kernelspec of another language runs no Python cells to probe.
fn other_language_kernel(args: &DoctorArgs) -> Option<&str> {
    args.engine
        .kernel
        .as_deref()
        .filter(|name| *name != "python3")
}

/// Whether `python` in a cell's shell is the kernel's own interpreter (issue 28): what
/// `bash("pip install …")` installs into must be what the cells import from.
async fn check_shell_python(engine: &Engine, report: &mut Report) {
    let cell = "import json as _j, subprocess as _s, sys as _y\n\
                _r = _s.run(['/bin/sh', '-c', 'python -c \"import sys; print(sys.prefix)\"'], \
                capture_output=True, text=True)\n\
                print(_j.dumps({'kernel': _y.prefix, 'shell': _r.stdout.strip(), \
                'error': _r.stderr.strip()[-300:]}))\n\
                del _j, _s, _y, _r";
    let Ok(outcome) = engine.submit(cell, CellOptions::default()).outcome().await else {
        return; // the kernel did not start: said above
    };
    let found: Option<serde_json::Value> = serde_json::from_str(outcome.stdout.trim()).ok();
    let Some(found) = found else {
        let why = outcome
            .error
            .map(|e| format!("{}: {}", e.ename, e.evalue))
            .unwrap_or_else(|| outcome.stdout.trim().to_string());
        report.note(&format!(
            "the shell's python was not checked: the kernel did not say ({why})"
        ));
        return;
    };
    let kernel = found["kernel"].as_str().unwrap_or_default();
    let shell = found["shell"].as_str().unwrap_or_default();
    if !kernel.is_empty() && kernel == shell {
        report.ok("`python` and `pip` in a cell's shell are the kernel's own environment");
    } else {
        let shell = if shell.is_empty() {
            format!(
                "no python ({})",
                found["error"].as_str().unwrap_or_default()
            )
        } else {
            format!("the one in {shell}")
        };
        report.problem(
            &format!(
                "`python` in a cell's shell is {shell}, not the kernel's ({kernel}): what a \
                 shell installs, cells do not see"
            ),
            "install from a cell with `%pip install NAME`; check what in the shell's startup \
             puts another python first on PATH",
        );
    }
}

/// What the kernel side decided about process isolation (`pi_repl_kernel.namespace`), asked of
/// the kernel that just started.
async fn check_isolation(engine: &Engine, args: &DoctorArgs, report: &mut Report) {
    if args.engine.jupyter_url.is_some() {
        report.note("process isolation: not applicable to a remote kernel");
        return;
    }
    if let Some(name) = &args.engine.kernel {
        report.warn(
            "process isolation: cells can see every process of this user and read their \
             environments",
            &format!("the kernelspec `{name}` starts its own kernel, outside a PID namespace"),
        );
        return;
    }
    let cell = "import json as _j; print(_j.dumps(__import__('pi_repl_kernel.namespace')\
                .namespace.status())); del _j";
    let Ok(outcome) = engine.submit(cell, CellOptions::default()).outcome().await else {
        return; // the kernel did not start: said above
    };
    let status: Option<serde_json::Value> = serde_json::from_str(outcome.stdout.trim()).ok();
    let Some(status) = status else {
        report.note("process isolation: the kernel did not say");
        return;
    };
    if status["isolated"].as_bool() == Some(true) {
        report.ok("process isolation: cells see only the kernel's own processes (a PID namespace of their own)");
    } else if status["reason"].as_str() == Some("not requested") {
        report.note(
            "process isolation: off (--no-process-isolation or PI_REPL_PROCESS_ISOLATION=0): \
             cells can see every process of this user",
        );
    } else {
        report.warn(
            "process isolation is unavailable: cells can see every process of this user and \
             read their environments",
            status["reason"].as_str().unwrap_or("no reason given"),
        );
    }
}

/// The variables of this environment a local kernel does not get, by name and rule (never a
/// value), and how to pass one (docs/security.md, `kernel::secrets`).
fn check_credentials(args: &DoctorArgs, report: &mut Report) {
    if args.engine.jupyter_url.is_some() {
        report.note("credentials: a remote kernel has the server's environment, not this one");
        return;
    }
    let withheld = args.engine.withheld_credentials();
    if withheld.is_empty() {
        report.ok("credentials: none in this environment (names and values checked)");
        return;
    }
    report.ok(&format!(
        "credentials withheld from the kernel (a cell does not see them): {}",
        withheld.len()
    ));
    for variable in &withheld {
        report.note(&variable.to_string());
    }
    report.note(
        "pass one with --pass-env NAME (or PI_REPL_PASS_ENV=NAME,...), all with \
         --pass-credentials",
    );
}

fn check_permissions(home: &Home, report: &mut Report) {
    let mut loose = Vec::new();
    for dir in [home.root().to_path_buf(), home.state(), home.outputs()] {
        if let Some(mode) = mode_of(&dir)
            && mode & 0o077 != 0
        {
            loose.push(format!("{} is {:o}", dir.display(), mode));
        }
    }
    if let Ok(sessions) = std::fs::read_dir(home.state()) {
        for session in sessions.filter_map(Result::ok) {
            let path = session.path();
            if let Some(mode) = mode_of(&path).filter(|m| m & 0o077 != 0) {
                loose.push(format!("{} is {:o}", path.display(), mode));
            }
        }
    }
    let key = home.root().join("snapshot.key");
    if let Some(mode) = mode_of(&key).filter(|m| m & 0o077 != 0) {
        loose.push(format!("{} is {:o}", key.display(), mode));
    }
    if loose.is_empty() {
        report.ok("pi-repl's directories and snapshot key are private to you");
    } else {
        report.problem(
            &format!("readable by others: {}", loose.join(", ")),
            "chmod 700 each directory listed (chmod 600 for snapshot.key)",
        );
    }
}

fn mode_of(path: &Path) -> Option<u32> {
    std::fs::metadata(path)
        .ok()
        .map(|m| m.permissions().mode() & 0o777)
}
