//! Driving a child until it ends: serving its requests (models within its budget, steps),
//! stopping it (cancel, its budget, the session's end: SIGTERM, then SIGKILL after
//! [`TERM_GRACE`]), and writing how it ended into its record before its process is collected.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::child_process::{Exit, exited, terminate};
use super::link::{self, Heard};
use super::orphans::Offspring;
use super::pi_child;
use super::record::{self, Record, Status};
use super::supervisor::{Changes, Ending, Supervisor, bump, now};
use crate::llm::ledger::Usage;

impl Supervisor {
    /// Serves one child until it ends, then writes its record and collects the process.
    pub(super) async fn drive(
        self: Arc<Self>,
        mut child: tokio::process::Child,
        mut record: Record,
        stop: CancellationToken,
        ending: Ending,
        is_pi: bool,
    ) {
        let began = Instant::now();
        let agents = record::agents_dir(&self.workspace);
        let offspring = child.id().map(|pid| Arc::new(Offspring::new(pid)));
        let usage: Arc<Mutex<Usage>> = Arc::default();
        let heard: Arc<Mutex<Heard>> = Arc::default();
        let requests = CancellationToken::new();
        let shared = Arc::new(Mutex::new(record.clone()));
        let stdout = child.stdout.take();
        let link = match (stdout, child.stdin.take()) {
            (Some(from_child), None) if is_pi => {
                let (usage, heard, shared) =
                    (Arc::clone(&usage), Arc::clone(&heard), Arc::clone(&shared));
                let agents = agents.clone();
                let changes = Arc::clone(&self.changes);
                let ending = Arc::clone(&ending);
                let stop = stop.clone();
                let offspring = offspring.clone();
                let tokens = record.budget.tokens;
                let on_news = {
                    let (usage, heard) = (Arc::clone(&usage), Arc::clone(&heard));
                    move || {
                        if let Some(offspring) = &offspring {
                            offspring.look();
                        }
                        update_record(&shared, &heard, &usage, &agents, &changes);
                    }
                };
                let over_budget = move || {
                    *ending.lock().unwrap_or_else(|e| e.into_inner()) = Some((
                        Status::Errored,
                        format!(
                            "its token budget of {tokens} ran out (spawn_agent(budget={{'tokens': N}}) sets it)"
                        ),
                    ));
                    stop.cancel();
                };
                let read = pi_child::read_events(
                    from_child,
                    pi_child::Reading {
                        heard,
                        usage,
                        max_tokens: tokens,
                        final_file: record.workspace.join(pi_child::FINAL_ANSWER_FILE),
                    },
                    on_news,
                    over_budget,
                );
                Some(tokio::spawn(read))
            }
            (Some(from_child), Some(to_child)) => {
                let (usage, heard, shared) =
                    (Arc::clone(&usage), Arc::clone(&heard), Arc::clone(&shared));
                let agents = agents.clone();
                // After each step, and at the final answer (written before the child exits).
                let on_news = {
                    let (usage, heard) = (Arc::clone(&usage), Arc::clone(&heard));
                    let changes = Arc::clone(&self.changes);
                    move || update_record(&shared, &heard, &usage, &agents, &changes)
                };
                let served = link::Served {
                    offspring: offspring.clone(),
                    answerer: self.answerer.clone(),
                    budget: record.budget,
                    usage,
                    heard,
                    cancel: requests.clone(),
                };
                let serve = link::serve_child(from_child, to_child, served, on_news);
                Some(tokio::spawn(serve))
            }
            _ => None,
        };
        let pid = child.id();
        let mut exited = Box::pin(exited(pid));
        let time_up = tokio::time::sleep(record.budget.time());
        let mut exit = Exit::Unknown;
        tokio::select! {
            ended = &mut exited => exit = ended,
            _ = stop.cancelled() => {
                let why = ending.lock().unwrap_or_else(|e| e.into_inner()).take();
                let why = why.unwrap_or((Status::Cancelled, "cancelled".into()));
                settle_first(&shared, &why, &agents, &self.changes);
                terminate(pid, &mut exited).await;
            }
            _ = time_up => {
                let why = (Status::Errored, format!(
                    "its time budget of {} s ran out (spawn_agent(budget={{'seconds': N}}) sets it)",
                    record.budget.seconds
                ));
                settle_first(&shared, &why, &agents, &self.changes);
                terminate(pid, &mut exited).await;
            }
        }
        // Its kernel, if it outlived it, is this host's now (it was killed from outside).
        if let Some(offspring) = &offspring {
            offspring.look_adopted();
        }
        // The child has exited (not yet collected): its last lines are read before the record
        // says how it ended.
        if let Some(link) = link {
            let _ = tokio::time::timeout(Duration::from_secs(2), link).await;
        }
        requests.cancel();
        let heard = std::mem::take(&mut *heard.lock().unwrap_or_else(|e| e.into_inner()));
        record = shared.lock().unwrap_or_else(|e| e.into_inner()).clone();
        record.steps = heard.steps;
        record.last_line = heard.last_line;
        record.usage = *usage.lock().unwrap_or_else(|e| e.into_inner());
        record.ended = Some(now());
        record.elapsed_ms = Some(began.elapsed().as_millis() as u64);
        // Settled already when its final answer came or the host ended it (`settle_first`);
        // otherwise it ended by itself without a word.
        if record.status == Status::Running {
            match heard.last {
                Some(last) => {
                    record.status = last.status;
                    record.result = last.result;
                    record.error = last.error;
                }
                None => {
                    // Killed by someone else (the OOM killer, a `kill -9`): gone without an
                    // end, which is what `lost` says.
                    let (status, how) = match exit {
                        Exit::Signal(signal) => (
                            Status::Lost,
                            format!("its process was killed by signal {signal} (not by pi-repl)"),
                        ),
                        Exit::Code(code) => (
                            Status::Errored,
                            format!("its process exited with code {code}"),
                        ),
                        Exit::Unknown => (Status::Errored, "its process ended".to_string()),
                    };
                    record.status = status;
                    record.error = Some(format!(
                        "{how} without a final answer; its transcript is {}",
                        record.output.display()
                    ));
                }
            }
        }
        if let Err(error) = record.write(&agents) {
            tracing::warn!(%error, id = %record.id, "cannot write a sub-agent's final record");
        }
        bump(&self.changes);
        // Collected only now that its record says how it ended.
        let _ = child.wait().await;
        if let Some(offspring) = offspring {
            // A killed child's kernel ends by its lifeline; collected here, not left a zombie.
            let reaped = tokio::task::spawn_blocking(move || offspring.reap_adopted()).await;
            if let Ok(count @ 1..) = reaped {
                tracing::debug!(id = %record.id, count, "collected what a killed sub-agent left");
            }
        }
        self.live
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&record.id);
        self.settled.notify_waiters();
    }
}

/// Rewrites a running child's record after a step or at its final answer (unless the host
/// settled it already: cancelled, out of time).
fn update_record(
    shared: &Mutex<Record>,
    heard: &Mutex<Heard>,
    usage: &Mutex<Usage>,
    agents: &std::path::Path,
    changes: &Changes,
) {
    let mut record = shared.lock().unwrap_or_else(|e| e.into_inner());
    if record.status != Status::Running {
        return;
    }
    let heard = heard.lock().unwrap_or_else(|e| e.into_inner());
    record.steps = heard.steps;
    record.last_line = heard.last_line.clone();
    record.usage = *usage.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(last) = &heard.last {
        record.status = last.status;
        record.result = last.result.clone();
        record.error = last.error.clone();
        record.ended = Some(now());
    }
    if let Err(error) = record.write(agents) {
        tracing::warn!(%error, "cannot update a sub-agent's record");
    }
    bump(changes);
}

/// Writes how a child ends before it is ended, unless its final answer came first.
fn settle_first(
    shared: &Mutex<Record>,
    why: &(Status, String),
    agents: &std::path::Path,
    changes: &Changes,
) {
    let mut record = shared.lock().unwrap_or_else(|e| e.into_inner());
    if record.status != Status::Running {
        return;
    }
    record.status = why.0;
    record.error = Some(why.1.clone());
    record.ended = Some(now());
    if let Err(error) = record.write(agents) {
        tracing::warn!(%error, "cannot update a sub-agent's record");
    }
    bump(changes);
}
