//! `pi-repl exec`: run cells in one fresh kernel, in order, and report each.
//!
//! Every cell runs even when an earlier one failed; Ctrl-C aborts the running cell (a real
//! `KeyboardInterrupt`) and skips the rest, a second Ctrl-C exits at once. A stdout closed by
//! its reader (`| head`) does the same as one Ctrl-C, and the exit code is then 141 (see
//! `stdout`). Otherwise the exit code is the worst outcome (see `cli` for the table).

use std::io::Read;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use tokio_util::sync::CancellationToken;

use super::printer::Printer;
use super::{EngineOptions, Exit, Failure, LlmOptions, SessionOptions};
use crate::engine::outcome::{Outcome, Status};
use crate::engine::{CellOptions, Engine};
use crate::home::Home;

#[derive(Debug, clap::Args)]
pub struct ExecArgs {
    #[command(flatten)]
    pub engine: EngineOptions,

    #[command(flatten)]
    pub session: SessionOptions,

    /// Abort a cell that runs longer than this many milliseconds.
    #[arg(long, value_name = "MS", value_parser = super::values::millis)]
    pub timeout: Option<u64>,

    /// Print one JSON object per cell on stdout instead of the cells' output.
    #[arg(long)]
    pub json: bool,

    /// Python cells to run, in order. `-` reads a cell from stdin.
    #[arg(value_name = "CODE")]
    pub cells: Vec<String>,

    /// First return the session's workspace to its state right after answered cell N (as
    /// `execute {"rewind": N}` does; `pi-repl sessions show` lists the kept states), then run
    /// the cells, if any. Needs `--session`: also for a session no server runs.
    #[arg(long, value_name = "N", value_parser = super::values::positive)]
    pub rewind: Option<u64>,

    #[command(flatten)]
    pub llm: LlmOptions,
}

/// What `exec` runs, in order: a rewind first when asked, then the cells.
enum Step {
    Rewind(u64),
    Cell(String),
}

pub async fn run(args: ExecArgs) -> Result<Exit, Failure> {
    if args.cells.is_empty() && args.rewind.is_none() {
        return Err(Failure::usage(
            anyhow::anyhow!("nothing to run: no cells were given"),
            Some(
                "pass cells (`pi-repl exec 'x = 1' 'x + 1'`, `-` reads one from stdin), or \
                 `--session NAME --rewind N` to rewind a session"
                    .into(),
            ),
        ));
    }
    let cells = read_cells(&args.cells)?;
    let home = Home::from_env()?;
    let session = args.session.open(&home, &args.engine.working_dir()?)?;
    if args.rewind.is_some() && session.dir.is_none() {
        return Err(Failure::usage(
            anyhow::anyhow!(
                "--rewind needs a durable session: an ephemeral workspace keeps no states"
            ),
            Some("name the session: `pi-repl exec --session NAME --rewind N`".into()),
        ));
    }
    let mut config = args.engine.engine_config(&home, &session).await?;
    args.llm.apply(&mut config, session.dir.as_deref())?;
    let agents = super::agent::supervisor(
        &config,
        &home,
        &session,
        0,
        args.engine.agent_limits(),
        false,
    )?;
    config.agents = Some(super::stdin_services::sub_agents(Arc::clone(&agents)));
    let engine = Engine::start(config);
    let interrupts = Interrupts::install();
    let options = CellOptions {
        timeout: args.timeout.map(Duration::from_millis),
    };
    let mut worst = Status::Ok;
    let mut failure = None;
    let steps = args.rewind.map(Step::Rewind).into_iter();
    for step in steps.chain(cells.into_iter().map(Step::Cell)) {
        if super::stdout::is_closed() {
            break; // nobody reads the output any more: the rest does not run
        }
        if interrupts.seen() {
            let skipped = skipped_outcome();
            if args.json {
                print_json(&skipped)?;
            }
            worst = worst.max(Status::Aborted);
            continue;
        }
        let handle = match step {
            Step::Rewind(to) => engine.submit_rewind(to),
            Step::Cell(code) => engine.submit(code, options.clone()),
        };
        interrupts.watch(handle.cancel_token());
        if super::stdout::is_closed() {
            handle.cancel(); // closed just before the watch began
        }
        let settled = if args.json {
            handle.outcome().await
        } else {
            let mut printer = Printer::default();
            let result = handle
                .outcome_with_events(|event| printer.event(event))
                .await;
            if let Ok(outcome) = &result {
                printer.outcome(outcome);
            }
            result
        };
        match settled {
            Ok(outcome) => {
                if args.json {
                    print_json(&outcome)?;
                }
                worst = worst.max(outcome.status);
            }
            Err(error) => {
                let hint = error.hint();
                failure = Some(Failure::new(error, hint));
                break;
            }
        }
    }
    engine.shutdown().await;
    agents
        .end_all("the parent session ended", super::agent::END_GRACE)
        .await;
    drop(session);
    match failure {
        Some(failure) => Err(failure),
        None => Ok(Exit::for_cells(worst)),
    }
}

fn print_json(outcome: &Outcome) -> Result<(), Failure> {
    let line = serde_json::to_string(outcome).context("cannot encode the outcome as JSON")?;
    super::stdout::line(line);
    Ok(())
}

/// The cells to run, with a `-` replaced by stdin's contents (allowed once).
fn read_cells(arguments: &[String]) -> Result<Vec<String>, Failure> {
    if arguments.iter().filter(|a| a.as_str() == "-").count() > 1 {
        return Err(Failure::usage(
            anyhow::anyhow!("`-` (read a cell from stdin) can be given only once"),
            None,
        ));
    }
    arguments
        .iter()
        .map(|argument| {
            if argument == "-" {
                let mut code = String::new();
                std::io::stdin()
                    .read_to_string(&mut code)
                    .context("cannot read the cell from stdin")?;
                Ok(code)
            } else {
                Ok(argument.clone())
            }
        })
        .collect::<anyhow::Result<Vec<_>>>()
        .map_err(Failure::from)
}

/// What a cell skipped after Ctrl-C reports in `--json` mode.
fn skipped_outcome() -> Outcome {
    let mut outcome = crate::engine::never_ran();
    outcome.stderr = "[skipped: an earlier cell was interrupted with Ctrl-C]\n".into();
    outcome
}

/// Ctrl-C handling: the first press aborts the running cell, the second exits.
struct Interrupts {
    current: Arc<Mutex<Option<CancellationToken>>>,
    seen: Arc<std::sync::atomic::AtomicBool>,
}

impl Interrupts {
    fn install() -> Interrupts {
        let current: Arc<Mutex<Option<CancellationToken>>> = Arc::default();
        let seen = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (current_task, seen_task) = (current.clone(), seen.clone());
        // stdout closed by its reader (`| head`): the running cell is aborted like on Ctrl-C,
        // and no other runs.
        let current_closed = current.clone();
        tokio::spawn(async move {
            super::stdout::closed().cancelled().await;
            if let Ok(slot) = current_closed.lock()
                && let Some(token) = slot.as_ref()
            {
                token.cancel();
            }
        });
        tokio::spawn(async move {
            while tokio::signal::ctrl_c().await.is_ok() {
                if seen_task.swap(true, std::sync::atomic::Ordering::SeqCst) {
                    crate::stderr_line!("pi-repl: interrupted twice; exiting");
                    std::process::exit(Exit::Interrupted.code().into());
                }
                crate::stderr_line!(
                    "pi-repl: interrupting the running cell (Ctrl-C again to exit at once)"
                );
                if let Ok(slot) = current_task.lock()
                    && let Some(token) = slot.as_ref()
                {
                    token.cancel();
                }
            }
        });
        Interrupts { current, seen }
    }

    fn watch(&self, token: CancellationToken) {
        if let Ok(mut slot) = self.current.lock() {
            *slot = Some(token);
        }
    }

    fn seen(&self) -> bool {
        self.seen.load(std::sync::atomic::Ordering::SeqCst)
    }
}
