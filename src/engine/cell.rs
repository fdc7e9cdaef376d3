//! Running one cell: send it, feed the state machine, enforce aborts, read the ending.
//!
//! Owns: the abort sequence (interrupt the process group, wait the grace period, kill), the
//! time limit and silence watchdog, cleanup of processes an aborted cell started, and turning
//! the ending into an `Outcome` (plus, if the kernel is lost, the reason for the next reset).
//! Output of earlier cells' threads that arrives meanwhile goes to `late_output`, and what has
//! gathered there is delivered with this outcome.

use std::time::Duration;

use jupyter_protocol::{JupyterMessage, ReplyStatus};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::late_output::LateOutputs;
use super::stdin_requests::{Started, StdinRequests};
use super::{EngineConfig, Request};
use crate::engine::execution::{CellRecord, CellRun};
use crate::engine::outcome::{Abort, AbortReason, CellError, CellEvent, Outcome, Reset, Status};
use crate::engine::output::SpillTarget;
use crate::kernel::processes::{self, BootTicks};
use crate::kernel::{Kernel, KernelEvent, KernelExit, KilledBy};

/// How long a cell whose reply came may wait for its `idle` (or the other way round) before it
/// settles anyway. ipykernel sends both at once; this only bounds a lost message.
const SETTLE_STRAGGLER: Duration = Duration::from_secs(5);

/// How long to wait for the kernel's exit after killing it.
const KILL_WAIT: Duration = Duration::from_secs(5);

/// Characters of a cell's first line quoted in a reset reason.
const QUOTED_CODE_CHARS: usize = 60;

pub(super) struct CellContext<'a> {
    pub number: u64,
    /// Set when this cell is the first in a rebuilt workspace.
    pub reset: Option<Reset>,
    /// Things the workspace has to tell this cell (a helper that did not load).
    pub notices: Vec<String>,
    pub config: &'a EngineConfig,
    pub stop: &'a CancellationToken,
    pub spill: Option<SpillTarget>,
    /// Output of earlier cells' threads, delivered with this cell's outcome.
    pub late: &'a mut LateOutputs,
    /// Cells other Jupyter clients ran (`visitors`), told in this cell's outcome.
    pub visitors: &'a mut super::visitors::Visitors,
    /// A durable session's capture (`snapshots::capture_expression`): the kernel forks a save of
    /// the state the cell leaves before it replies.
    pub capture: Option<(String, String)>,
    /// The cell's outputs for the live notebook, when one is written: every IOPub message of
    /// the cell is handed to it as it comes.
    pub notebook: Option<crate::engine::notebook::CellOutputs>,
}

/// How a cell ended, for the engine.
pub(super) struct Ran {
    pub outcome: Outcome,
    /// Set when the kernel was lost: the reason the next cell's reset notice gives.
    pub lost: Option<String>,
    /// The kernel numbered this cell as the engine did (its tracebacks say `Cell In[cell]`).
    pub numbered_alike: bool,
    /// What the capture did (absent when none was asked for, or the reply never came).
    pub capture: Option<super::snapshots::SaveReport>,
    /// The cell's outputs for the live notebook (given back from `CellContext::notebook`).
    pub notebook: Option<crate::engine::notebook::CellOutputs>,
}

/// How the wait for a cell ended.
enum Ending {
    Settled,
    Died(KernelExit),
}

/// The outcome of a cell that was cancelled before it ran.
pub fn never_ran() -> Outcome {
    Outcome {
        status: Status::Aborted,
        cell: 0,
        stdout: String::new(),
        stderr: String::new(),
        result: None,
        result_display: None,
        displays: Vec::new(),
        displays_dropped: 0,
        error: None,
        duration_ms: 0,
        truncated: Vec::new(),
        abort: Some(Abort {
            reason: AbortReason::Cancelled,
            kernel_killed: false,
            processes_ended: 0,
        }),
        reset: None,
        notices: Vec::new(),
        late_output: Vec::new(),
        llm: None,
        stdout_remainder: String::new(),
        raw_output: Vec::new(),
        stderr_remainder: String::new(),
    }
}

/// Runs `request` on `kernel`.
pub(super) async fn run(
    kernel: &mut Kernel,
    request: &Request,
    mut context: CellContext<'_>,
) -> Ran {
    let config = context.config;
    let started = Instant::now();
    let started_ticks = BootTicks::now();
    let stderr_mark = kernel.stderr_mark();
    request.live.start(context.reset.clone());
    // The caller may have dropped the handle; then nobody watches the events.
    let _ = request.events.send(CellEvent::Started {
        cell: context.number,
        reset: context.reset.clone(),
        notices: context.notices.clone(),
    });
    let (aside, dropped) = kernel.take_aside();
    for message in &aside {
        if !context.visitors.take(message) {
            context.late.take(message);
        }
    }
    context.late.not_kept(dropped);
    let expressions = context
        .capture
        .take()
        .map(|(key, expression)| std::collections::HashMap::from([(key, expression)]));
    let mut run = match kernel.execute(&request.code, false, expressions).await {
        Ok(msg_id) => {
            context.late.remember(&msg_id, context.number);
            CellRun::new(msg_id, config.limits, context.spill.clone())
                .published(request.live.clone())
        }
        Err(error) => {
            tracing::warn!(%error, "could not send the cell; replacing the kernel");
            kernel.kill(KilledBy::Host);
            let run = CellRun::new(String::new(), config.limits, context.spill.clone());
            let exit = wait_for_exit(kernel).await;
            return finish(
                kernel,
                request,
                &mut context,
                run,
                Ending::Died(exit),
                None,
                started,
                started_ticks,
                stderr_mark,
            )
            .await;
        }
    };

    let mut abort: Option<AbortReason> = None;
    let mut grace_deadline: Option<Instant> = None;
    let timeout_deadline = request.timeout.map(|limit| started + limit);
    let mut silence_deadline = config.silence_timeout.map(|limit| started + limit);
    let mut straggler_deadline: Option<Instant> = None;
    let mut stopping = false;
    // The cell's model requests (`llm_query`): answered in tasks, replied to from this loop.
    let llm = StdinRequests::new(
        config.llm.clone(),
        config.agents.clone(),
        config.host_tools.clone(),
        context.number,
    );
    let (llm_replies, mut llm_answered) = mpsc::unbounded_channel::<(JupyterMessage, String)>();
    let mut llm_in_flight = 0usize;

    let ending = loop {
        if run.is_settled() {
            break Ending::Settled;
        }
        let begin_abort = tokio::select! {
            biased;
            event = kernel.next_event() => {
                match event {
                    Some(KernelEvent::IoPub(message)) if !run.owns(&message) => {
                        if !context.visitors.take(&message) {
                            context.late.take(&message);
                        }
                    }
                    Some(KernelEvent::IoPub(message)) => {
                        if let Some(outputs) = &mut context.notebook {
                            outputs.take(&message);
                        }
                        let events = run.on_iopub(&message);
                        if !events.is_empty() {
                            silence_deadline = config.silence_timeout.map(|limit| Instant::now() + limit);
                        }
                        for event in events {
                            let _ = request.events.send(event);
                        }
                    }
                    Some(KernelEvent::ShellReply(message)) => {
                        for event in run.on_shell_reply(&message) {
                            let _ = request.events.send(event);
                        }
                    }
                    Some(KernelEvent::StdinRequest(message)) => {
                        match llm.start(message, abort.is_some(), &llm_replies) {
                            Started::InFlight => llm_in_flight += 1,
                            Started::Answered(message, value) => {
                                if let Err(error) = kernel.reply_stdin(&message, value).await {
                                    tracing::debug!(%error, "could not answer a stdin request");
                                }
                            }
                        }
                    }
                    Some(KernelEvent::Exited(exit)) => break Ending::Died(exit),
                    None => break Ending::Died(unknown_exit()),
                }
                if straggler_deadline.is_none() && (run.has_reply() || run.is_idle()) {
                    straggler_deadline = Some(Instant::now() + SETTLE_STRAGGLER);
                }
                None
            }
            Some((message, value)) = llm_answered.recv() => {
                llm_in_flight = llm_in_flight.saturating_sub(1);
                if let Err(error) = kernel.reply_stdin(&message, value).await {
                    tracing::debug!(%error, "could not answer the cell's model request");
                }
                // Waiting for a model is not silence.
                silence_deadline = config.silence_timeout.map(|limit| Instant::now() + limit);
                None
            }
            _ = request.cancel.cancelled(), if abort.is_none() => Some(AbortReason::Cancelled),
            _ = sleep_until_opt(timeout_deadline), if abort.is_none() && timeout_deadline.is_some() => {
                Some(AbortReason::Timeout { after_ms: millis(request.timeout) })
            }
            _ = sleep_until_opt(silence_deadline), if abort.is_none() && silence_deadline.is_some() && llm_in_flight == 0 => {
                Some(AbortReason::Silent { after_ms: millis(config.silence_timeout) })
            }
            _ = context.stop.cancelled(), if !stopping => {
                stopping = true;
                abort.get_or_insert(AbortReason::Shutdown);
                kernel.kill(KilledBy::Host);
                None
            }
            _ = sleep_until_opt(grace_deadline), if grace_deadline.is_some() => {
                grace_deadline = None;
                kernel.kill(KilledBy::AbortGrace { grace_ms: config.abort_grace.as_millis() as u64 });
                None
            }
            _ = sleep_until_opt(straggler_deadline), if straggler_deadline.is_some() => {
                tracing::warn!("settling a cell whose reply or idle status never came");
                break Ending::Settled;
            }
        };
        if let Some(reason) = begin_abort {
            // Its model requests are cancelled (the client is told); the interrupt ends the
            // kernel's wait for them.
            llm.cancel();
            kernel.interrupt();
            abort = Some(reason);
            grace_deadline = Some(Instant::now() + config.abort_grace);
        }
    };
    llm.cancel();
    let mut ran = finish(
        kernel,
        request,
        &mut context,
        run,
        ending,
        abort,
        started,
        started_ticks,
        stderr_mark,
    )
    .await;
    ran.outcome.llm = llm.usage();
    ran
}

#[allow(clippy::too_many_arguments)]
async fn finish(
    kernel: &mut Kernel,
    request: &Request,
    context: &mut CellContext<'_>,
    run: CellRun,
    ending: Ending,
    abort: Option<AbortReason>,
    started: Instant,
    started_ticks: BootTicks,
    stderr_mark: crate::kernel::StderrMark,
) -> Ran {
    let record = run.finish();
    let number = context.number;
    let numbered_alike = record.execution_count == Some(number);
    let capture = super::snapshots::capture_report(&record.expressions);
    let (late_output, late_cuts) = context.late.deliver();
    let notebook = context.notebook.take();
    let (mut outcome, lost) = settle(
        kernel,
        request,
        context,
        record,
        ending,
        abort,
        started,
        started_ticks,
        stderr_mark,
    )
    .await;
    outcome.late_output = late_output;
    outcome.truncated.extend(late_cuts);
    outcome.notices.splice(0..0, context.visitors.notices());
    Ran {
        outcome,
        lost,
        numbered_alike,
        capture,
        notebook,
    }
}

/// The outcome of a finished wait and, when the kernel was lost, the reason the next cell's
/// reset notice gives.
#[allow(clippy::too_many_arguments)]
async fn settle(
    kernel: &mut Kernel,
    request: &Request,
    context: &CellContext<'_>,
    record: CellRecord,
    ending: Ending,
    abort: Option<AbortReason>,
    started: Instant,
    started_ticks: BootTicks,
    stderr_mark: crate::kernel::StderrMark,
) -> (Outcome, Option<String>) {
    let number = context.number;
    let mut record = record;
    if !kernel.runs_python() {
        // Other kernels colour their results (Deno's inspect output); pi-repl's ipykernel
        // never does, and a Python value's own escape codes stay as they are.
        if let Some(result) = &mut record.result {
            result.text = crate::engine::execution::strip_ansi(&result.text);
        }
    }
    match ending {
        Ending::Settled => {
            let processes_ended = match abort {
                Some(_) => match kernel.pid() {
                    Some(pid) => processes::end_started_since(pid, started_ticks).await,
                    // A remote kernel's processes are out of reach (the docs say so).
                    None => 0,
                },
                None => 0,
            };
            let status = match (&abort, &record.reply) {
                (Some(_), _) => Status::Aborted,
                (None, Some(ReplyStatus::Ok)) if record.error.is_none() => Status::Ok,
                (None, Some(ReplyStatus::Ok)) => Status::Error,
                (None, Some(_)) => Status::Error,
                (None, None) if record.error.is_some() => Status::Error,
                (None, None) => Status::Ok,
            };
            let abort = abort.map(|reason| Abort {
                reason,
                kernel_killed: false,
                processes_ended,
            });
            let error = record.error.clone();
            let mut done = outcome(record, status, number, error, abort, started);
            done.reset = context.reset.clone();
            done.notices.splice(0..0, context.notices.iter().cloned());
            (done, None)
        }
        Ending::Died(exit) => {
            let cause = exit.describe();
            let quoted = quote_code(&request.code);
            let (status, error, reset_reason, abort) = match (&exit.killed_by, abort) {
                (Some(KilledBy::AbortGrace { .. }), Some(reason)) => (
                    Status::Aborted,
                    CellError {
                        ename: "Aborted".into(),
                        evalue: format!(
                            "{}; {cause}. The next cell starts in a fresh kernel: variables, \
                             functions and imports from earlier cells are gone.",
                            capitalize(&reason.describe())
                        ),
                        traceback: Vec::new(),
                    },
                    format!(
                        "an abort killed the kernel while cell {number} ({quoted}) ran: {cause}"
                    ),
                    Some(Abort {
                        reason,
                        kernel_killed: true,
                        processes_ended: 0,
                    }),
                ),
                (Some(KilledBy::Host), Some(reason)) => (
                    Status::Aborted,
                    CellError {
                        ename: "Aborted".into(),
                        evalue: format!(
                            "{}; the kernel was stopped.",
                            capitalize(&reason.describe())
                        ),
                        traceback: Vec::new(),
                    },
                    format!("the kernel was stopped while cell {number} ({quoted}) ran"),
                    Some(Abort {
                        reason,
                        kernel_killed: true,
                        processes_ended: 0,
                    }),
                ),
                (_, abort) => (
                    Status::Died,
                    CellError {
                        ename: "KernelDied".into(),
                        evalue: format!(
                            "{cause}, while this cell was running. The next cell starts in a \
                             fresh kernel: variables, functions and imports from earlier cells \
                             are gone."
                        ),
                        traceback: crate::kernel::exit::crash_report(
                            &kernel.stderr_since(stderr_mark),
                        ),
                    },
                    format!("the kernel died while cell {number} ({quoted}) ran: {cause}"),
                    abort.map(|reason| Abort {
                        reason,
                        kernel_killed: false,
                        processes_ended: 0,
                    }),
                ),
            };
            let mut done = outcome(record, status, number, Some(error), abort, started);
            done.reset = context.reset.clone();
            done.notices.splice(0..0, context.notices.iter().cloned());
            (done, Some(reset_reason))
        }
    }
}

fn outcome(
    record: CellRecord,
    status: Status,
    cell: u64,
    error: Option<CellError>,
    abort: Option<Abort>,
    started: Instant,
) -> Outcome {
    let mut truncated = Vec::new();
    let mut raw_output = Vec::new();
    for capped in [
        Some(&record.stdout),
        Some(&record.stderr),
        record.result.as_ref(),
        record.traceback.as_ref(),
    ]
    .into_iter()
    .flatten()
    {
        if let Some(t) = &capped.truncation {
            truncated.push(t.clone());
        }
        raw_output.extend(capped.raw_file.clone());
    }
    Outcome {
        status,
        cell,
        stdout: record.stdout.text,
        stderr: record.stderr.text,
        result: record.result.map(|r| r.text),
        result_display: record.result_display,
        displays: record.displays,
        displays_dropped: record.displays_dropped,
        error,
        duration_ms: started.elapsed().as_millis() as u64,
        truncated,
        raw_output,
        abort,
        reset: None,
        notices: record.cleared.notice().into_iter().collect(),
        late_output: Vec::new(),
        llm: None,
        stdout_remainder: record.stdout.live_remainder,
        stderr_remainder: record.stderr.live_remainder,
    }
}

async fn wait_for_exit(kernel: &mut Kernel) -> KernelExit {
    let deadline = Instant::now() + KILL_WAIT;
    loop {
        match tokio::time::timeout_at(deadline, kernel.next_event()).await {
            Ok(Some(KernelEvent::Exited(exit))) => return exit,
            Ok(Some(_)) => continue,
            Ok(None) | Err(_) => return unknown_exit(),
        }
    }
}

fn unknown_exit() -> KernelExit {
    KernelExit {
        code: None,
        signal: None,
        oom_killed: false,
        killed_by: None,
        remote: None,
    }
}

async fn sleep_until_opt(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

fn millis(duration: Option<Duration>) -> u64 {
    duration.map_or(0, |d| d.as_millis() as u64)
}

/// `text` with a capital first letter; a name that is written in lower case (`pi-repl`) stays.
fn capitalize(text: &str) -> String {
    if text.starts_with("pi-repl") {
        return text.to_string();
    }
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// The cell's first non-blank line, short, in backticks.
pub fn quote_code(code: &str) -> String {
    let line = code
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    let short: String = line.chars().take(QUOTED_CODE_CHARS).collect();
    let ellipsis = if line.chars().count() > QUOTED_CODE_CHARS || code.trim().lines().count() > 1 {
        " …"
    } else {
        ""
    };
    format!("`{short}{ellipsis}`")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_keeps_the_first_line_short() {
        assert_eq!(quote_code("x = 1"), "`x = 1`");
        assert_eq!(quote_code("\n  import os\nos.getcwd()"), "`import os …`");
        let long = "y".repeat(100);
        assert_eq!(quote_code(&long), format!("`{} …`", "y".repeat(60)));
    }
}
