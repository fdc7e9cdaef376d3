//! The cells a server's calls started, kept past their calls: a call answers when its wait is
//! over while its cell runs on, and a later call (`{"cell": N}`) collects it.
//!
//! Owns, per cell: its state (queued, running, ended), how much of what it printed the model
//! has seen (a place in the engine's live view of the cell, `engine::live_view`, which holds
//! the text: the book keeps none of its own), each waiting call's progress drawn from that view,
//! its outcome until a call has returned it (and after, to repeat it), and whether the model was
//! told that it ended. Every cell `execute` submits is tracked; one
//! that ends within its own call's wait is answered by that call and forgotten. One that
//! outlives its call is *detached*: when it ends with no call waiting for it, the next result
//! of any call starts with a `<cell_finished>` notice, so its outcome is never lost (a cell
//! handed to an MCP task is reported through `tasks/get` instead, see `tasks`). A durable
//! session keeps detached cells on disk too (`cell_records`). When the workspace was rebuilt
//! before a cell started, the first answer that speaks of the cell (`running`, its
//! `<cell_finished>` notice, or its outcome) carries the `<repl_engine_reset>` notice, once.
//! Does not own: running cells (the engine), the call's wait and progress (`server`), the text
//! of an outcome (`view::render`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::cell_records::{self, CellRecord, CellRecords, RecordState};
use crate::engine::live_view::{Cursor, LiveView, Seen};
use crate::engine::outcome::{AbortReason, Channel, Outcome, Reset, Status};
use crate::engine::{CellHandle, EngineError};
use crate::terminal_text::LiveDraw;

/// The least time between two progress messages that only redraw a progress bar.
const REDRAW_EVERY: Duration = Duration::from_millis(100);

/// Ended detached cells kept in memory once the model has had them (to repeat an outcome).
const KEPT_COLLECTED: usize = 20;

/// Lines of a finished cell's output quoted in its notice.
const NOTICE_LINES: usize = 5;

/// Characters of a finished cell's result quoted in its notice.
const NOTICE_RESULT_CHARS: usize = 300;

/// How a cell ended.
#[derive(Debug, Clone)]
pub enum Ended {
    /// It ran (or was aborted, or its kernel died): its outcome.
    Ran(Box<Outcome>),
    /// The engine could not run it.
    Failed { message: String },
    /// Read from the record an earlier server wrote: the text the model reads.
    Recorded(Box<CellRecord>),
}

impl Ended {
    pub fn status(&self) -> &str {
        match self {
            Ended::Ran(outcome) => outcome.status.as_str(),
            Ended::Failed { .. } => "failed",
            Ended::Recorded(record) => record.status.as_deref().unwrap_or("lost"),
        }
    }
}

/// One tracked cell.
struct Entry {
    code: String,
    submitted: Instant,
    submitted_at: String,
    started: Option<Instant>,
    /// The engine's live view of it while it may still be read (`None` for a cell read from an
    /// earlier server's record).
    view: Option<LiveView>,
    /// How much of its output earlier results of this cell showed.
    seen: Cursor,
    /// How the workspace was rebuilt before it started, if it was, and whether an answer
    /// before its outcome told it already (then its outcome does not again).
    reset: Option<Reset>,
    reset_told: bool,
    ended: Option<(Ended, Instant)>,
    /// A call answered before it ended.
    detached: bool,
    /// Its call was answered with an MCP task handle: it is reported through `tasks/get`, not
    /// by a `<cell_finished>` notice.
    task: bool,
    /// Calls waiting for it now.
    waiters: usize,
    collected: bool,
    reported: bool,
    /// The file holding its whole outcome as text (detached cells).
    output_file: Option<PathBuf>,
    cancel: Option<CancellationToken>,
    changed: watch::Sender<u64>,
}

impl Entry {
    /// A cell sent at `submitted` that has not started, printed nothing and is not detached.
    fn new(code: String, submitted_at: String, submitted: Instant) -> Entry {
        let (changed, _) = watch::channel(0);
        Entry {
            code,
            submitted,
            submitted_at,
            started: None,
            view: None,
            seen: Cursor::default(),
            reset: None,
            reset_told: false,
            ended: None,
            detached: false,
            task: false,
            waiters: 0,
            collected: false,
            reported: false,
            output_file: None,
            cancel: None,
            changed,
        }
    }

    fn elapsed(&self) -> Duration {
        match &self.ended {
            Some((_, at)) => *at - self.started.unwrap_or(self.submitted),
            None => self.started.unwrap_or(self.submitted).elapsed(),
        }
    }

    /// How long it ran, when that is known (not for a cell an earlier server lost).
    fn ran_for(&self) -> Option<Duration> {
        match &self.ended {
            Some((Ended::Recorded(record), _)) if record.duration_ms.is_none() => None,
            _ => Some(self.elapsed()),
        }
    }

    fn bump(&self) {
        self.changed.send_modify(|v| *v += 1);
    }

    /// How much of `channel` earlier results showed, and whether the channel went over its cap
    /// (then its outcome keeps a head and a tail, and does not start with what was shown).
    fn shown(&self, channel: Channel) -> (usize, bool) {
        match &self.view {
            Some(view) => (
                self.seen.read_of(view, channel),
                view.went_over_cap(channel),
            ),
            None => (0, false),
        }
    }
}

/// One waiting call's place in its cell's output: what it has drawn as progress.
pub struct Reader {
    cursor: Cursor,
    draw: LiveDraw,
    redrawn: Option<Instant>,
    /// The reset notice is drawn (or was there before this call began).
    reset_drawn: bool,
}

/// What a waiting call takes away when its wait ends with the cell still going.
#[derive(Debug, Clone)]
pub struct Pending {
    pub cell: u64,
    /// `running`, or `queued` behind `blocked_by`.
    pub queued: bool,
    pub blocked_by: Option<u64>,
    /// How long it has run (or been queued).
    pub elapsed: Duration,
    pub new_stdout: String,
    pub new_stderr: String,
    pub rich_so_far: usize,
    /// The workspace was rebuilt before it started, and no earlier answer said so.
    pub reset: Option<Reset>,
}

/// What a call takes away when the cell has ended.
#[derive(Debug, Clone)]
pub struct Final {
    pub cell: u64,
    pub ended: Ended,
    /// The cell outlived an earlier call (its result then says so, with only the new output).
    pub detached: bool,
    /// It was collected by an earlier call: this is a repeat.
    pub repeat: bool,
    /// Its output was cut (over the cap) after a part of it was shown: the output here is the
    /// whole output as kept, beginning included, not only what is new.
    pub whole_again: bool,
    /// How long it ran (`None`: not known, for a cell an earlier server lost).
    pub ran_for: Option<Duration>,
    pub output_file: Option<PathBuf>,
}

/// Where a waiting call stands.
pub enum Look {
    Ended(Final),
    Pending(Pending),
    /// Not a cell this session knows.
    Unknown {
        last: u64,
    },
}

/// Where a cell stands, seen without collecting it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CellState {
    /// Waiting behind `blocked_by` (or earlier cells) for `elapsed`.
    Queued {
        blocked_by: Option<u64>,
        elapsed: Duration,
    },
    Running {
        elapsed: Duration,
    },
    /// Ended with `status` (`ok`, `error`, `aborted`, `died`, `failed`, ...) after `elapsed`.
    Ended {
        status: String,
        elapsed: Duration,
    },
}

/// The cells of one server.
pub struct CellBook {
    cells: Mutex<BTreeMap<u64, Entry>>,
    records: Option<CellRecords>,
    /// Where the whole outcome of a detached cell is written (`<prefix>-cell<N>.txt`).
    output_dir: Option<PathBuf>,
    output_prefix: String,
}

impl CellBook {
    /// A book for one server; `records` for a durable session: what an earlier server left
    /// unreported is reported by this one.
    pub fn new(
        records: Option<CellRecords>,
        output_dir: Option<PathBuf>,
        output_prefix: String,
    ) -> Arc<CellBook> {
        let mut cells = BTreeMap::new();
        for record in records.iter().flat_map(CellRecords::load) {
            if record.collected && record.reported {
                continue;
            }
            let now = Instant::now();
            // Its notice and its collection say how long it ran, as recorded (a lost cell's
            // time is not known).
            let ran = Duration::from_millis(record.duration_ms.unwrap_or(0));
            let started = now.checked_sub(ran).unwrap_or(now);
            let mut entry = Entry::new(record.code.clone(), record.submitted_at.clone(), started);
            entry.started = Some(started);
            entry.output_file = record.output_file.clone();
            entry.detached = true;
            entry.collected = record.collected;
            entry.reported = record.reported;
            let cell = record.cell;
            entry.ended = Some((Ended::Recorded(Box::new(record)), now));
            cells.insert(cell, entry);
        }
        Arc::new(CellBook {
            cells: Mutex::new(cells),
            records,
            output_dir,
            output_prefix,
        })
    }

    /// The last number an earlier server of this session gave (0 for none).
    pub fn last_recorded_number(&self) -> u64 {
        self.records.as_ref().map_or(0, CellRecords::last_number)
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<u64, Entry>> {
        // A panic while holding the lock leaves plain data behind; keep serving.
        self.cells
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Tracks a submitted cell: its events and outcome are gathered here from now on.
    pub fn track(self: &Arc<Self>, handle: CellHandle, code: &str) -> u64 {
        let number = handle.number;
        let mut entry = Entry::new(
            crate::engine::quote_code(code),
            cell_records::now(),
            Instant::now(),
        );
        entry.cancel = Some(handle.cancel_token());
        self.lock().insert(number, entry);
        if let Some(records) = &self.records {
            records.note_number(number);
        }
        let book = Arc::clone(self);
        // The view holds the output; the events (one copy each, for a printer) are not read
        // (`outcome` lets go of them).
        let view = handle.live.clone();
        let mut changes = view.watch();
        if let Some(entry) = self.lock().get_mut(&number) {
            entry.view = Some(view);
        }
        tokio::spawn(async move {
            let outcome = handle.outcome();
            tokio::pin!(outcome);
            let settled = loop {
                tokio::select! {
                    biased;
                    changed = changes.changed() => {
                        if changed.is_ok() {
                            book.on_change(number);
                        }
                    }
                    settled = &mut outcome => break settled,
                }
            };
            book.on_change(number);
            book.on_end(number, settled).await;
        });
        number
    }

    /// The cell's view changed: note when it started (and in what workspace), and wake the
    /// calls waiting for it.
    fn on_change(&self, number: u64) {
        let mut cells = self.lock();
        let Some(entry) = cells.get_mut(&number) else {
            return;
        };
        if entry.started.is_none()
            && let Some(start) = entry.view.as_ref().and_then(LiveView::started)
        {
            entry.started = start.at.map(Instant::from_std);
            entry.reset = start.reset;
        }
        entry.bump();
    }

    async fn on_end(&self, number: u64, settled: Result<Outcome, EngineError>) {
        let stopped = ended_by_stop(&settled);
        let ended = match settled {
            Ok(outcome) => Ended::Ran(Box::new(outcome)),
            Err(error) => {
                let mut message = format!("error: {error}");
                if let Some(hint) = error.hint() {
                    message.push_str(&format!("\nhint: {hint}"));
                }
                Ended::Failed { message }
            }
        };
        let away = {
            let mut cells = self.lock();
            let Some(entry) = cells.get_mut(&number) else {
                return;
            };
            entry.ended = Some((ended.clone(), Instant::now()));
            entry.cancel = None;
            entry.bump();
            entry.detached
        };
        // A cell the server's own stop ended keeps its record as last written (queued or
        // running), so the next server reports it as lost whether or not this one gets to
        // write more before it exits.
        if away && !stopped {
            // Nobody may ask for a while: its whole outcome goes to a file now, and on disk.
            let output_file = self.write_output_file(number, &ended).await;
            let mut cells = self.lock();
            if let Some(entry) = cells.get_mut(&number) {
                entry.output_file = output_file;
                self.record(number, entry);
            }
        }
    }

    async fn write_output_file(&self, number: u64, ended: &Ended) -> Option<PathBuf> {
        let dir = self.output_dir.clone()?;
        let path = dir.join(format!("{}-cell{number}.txt", self.output_prefix));
        let text = whole_text(ended);
        let target = path.clone();
        let written = tokio::task::spawn_blocking(move || {
            crate::fsutil::create_private_dir(&dir)?;
            crate::fsutil::write_output(&target, text.as_bytes())
        })
        .await;
        match written {
            Ok(Ok(())) => Some(path),
            Ok(Err(error)) => {
                tracing::warn!(cell = number, %error, "could not write the cell's output file");
                None
            }
            Err(_) => None,
        }
    }

    /// Writes the record of a detached cell (durable sessions).
    fn record(&self, number: u64, entry: &Entry) {
        let Some(records) = &self.records else {
            return;
        };
        if !entry.detached {
            return;
        }
        let (state, status, ended_at, duration_ms, text, is_error) = match &entry.ended {
            Some((Ended::Recorded(record), _)) => {
                let mut record = (**record).clone();
                record.collected = entry.collected;
                record.reported = entry.reported;
                records.write(&record);
                return;
            }
            Some((ended, _)) => (
                RecordState::Ended,
                Some(ended.status().to_string()),
                Some(cell_records::now()),
                Some(entry.elapsed().as_millis() as u64),
                whole_text(ended),
                !matches!(ended, Ended::Ran(outcome) if outcome.status == Status::Ok),
            ),
            None => (
                if entry.started.is_some() {
                    RecordState::Running
                } else {
                    RecordState::Queued
                },
                None,
                None,
                None,
                so_far(entry),
                false,
            ),
        };
        records.write(&CellRecord {
            cell: number,
            code: entry.code.clone(),
            state,
            status,
            submitted_at: entry.submitted_at.clone(),
            ended_at,
            duration_ms,
            text,
            is_error,
            output_file: entry.output_file.clone(),
            collected: entry.collected,
            reported: entry.reported,
            server_pid: std::process::id(),
        });
    }

    /// Changes of cell `number` (`None` when it is not known).
    pub fn watch(&self, number: u64) -> Option<watch::Receiver<u64>> {
        self.lock()
            .get(&number)
            .map(|entry| entry.changed.subscribe())
    }

    /// Registers a waiting call; its progress starts at the beginning of the cell's output
    /// (`from_start`: the call that submitted it) or at what is there now (a later look).
    pub fn begin_wait(&self, number: u64, from_start: bool) -> Option<Reader> {
        let mut cells = self.lock();
        let entry = cells.get_mut(&number)?;
        entry.waiters += 1;
        let cursor = match &entry.view {
            Some(view) => view.cursor(from_start),
            None => Cursor::default(),
        };
        Some(Reader {
            cursor,
            draw: LiveDraw::default(),
            redrawn: None,
            reset_drawn: !from_start,
        })
    }

    /// Progress messages after the reader's place (moving it on), and whether the cell has
    /// ended. Drawn from the engine's view as it is now: final text as it came, a progress
    /// bar redrawn in place at most every [`REDRAW_EVERY`] (the next final text, or the
    /// result, carries its latest state; a bar whose line ended is erased at once).
    pub fn progress_since(&self, number: u64, reader: &mut Reader) -> (Vec<String>, bool) {
        let cells = self.lock();
        let Some(entry) = cells.get(&number) else {
            return (Vec::new(), true);
        };
        let mut messages = Vec::new();
        if !reader.reset_drawn && entry.started.is_some() {
            reader.reset_drawn = true;
            if let Some(reset) = &entry.reset {
                messages.push(format!("{}\n", reset.notice()));
            }
        }
        if let Some(view) = &entry.view {
            let due = reader.redrawn.is_none_or(|at| at.elapsed() >= REDRAW_EVERY);
            let draw = &mut reader.draw;
            let mut redrawn = false;
            view.read(&mut reader.cursor, due, |seen| {
                messages.push(match seen {
                    Seen::Cleared => draw.cleared(),
                    Seen::Text { text, .. } => draw.output(text),
                    Seen::OverCap(channel) => draw.output(&format!(
                        "\n[pi-repl: {} is over its limit; the end is in the result]\n",
                        channel.as_str()
                    )),
                    Seen::Rich(kinds) => draw.output(&format!("[{kinds} output]\n")),
                    Seen::Unfinished([stdout, stderr]) => {
                        draw.note(false, stdout);
                        draw.note(true, stderr);
                        redrawn = true;
                        draw.redraw()
                    }
                })
            });
            if redrawn {
                reader.redrawn = Some(Instant::now());
            }
        }
        messages.retain(|message| !message.is_empty());
        (messages, entry.ended.is_some())
    }

    /// Aborts cell `number` (a running cell is interrupted; a queued one never runs). False
    /// when it is not known or has ended.
    pub fn interrupt(&self, number: u64) -> bool {
        match self.lock().get(&number).and_then(|e| e.cancel.clone()) {
            Some(cancel) => {
                cancel.cancel();
                true
            }
            None => false,
        }
    }

    /// Ends the wait of a call its client cancelled (its answer is never read): the cell is
    /// detached, so its end is reported to the next call (or collected with `{"cell": N}`),
    /// and nothing is marked as shown or collected.
    pub fn abandon_wait(&self, number: u64) {
        let mut cells = self.lock();
        let Some(entry) = cells.get_mut(&number) else {
            return;
        };
        entry.waiters = entry.waiters.saturating_sub(1);
        if !entry.detached {
            entry.detached = true;
            self.record(number, entry);
        }
    }

    /// Ends a call's wait: the cell's outcome if it has ended (the first time, its collection),
    /// or what is new since the last look (the cell is detached from then on).
    pub fn finish_wait(&self, number: u64) -> Look {
        let mut cells = self.lock();
        let last = cells.keys().next_back().copied().unwrap_or(0);
        let blocked_by = cells
            .iter()
            .find(|(n, e)| **n < number && e.started.is_some() && e.ended.is_none())
            .map(|(n, _)| *n);
        let Some(entry) = cells.get_mut(&number) else {
            return Look::Unknown { last };
        };
        entry.waiters = entry.waiters.saturating_sub(1);
        if let Some((ended, _)) = &entry.ended {
            // The first collection of a detached cell shows only what no result showed yet.
            let (shown, whole_again) = match ended {
                Ended::Ran(outcome) if entry.detached && !entry.collected => {
                    let (stdout, cut_out) = unseen(&outcome.stdout, entry.shown(Channel::Stdout));
                    let (stderr, cut_err) = unseen(&outcome.stderr, entry.shown(Channel::Stderr));
                    let mut trimmed = (**outcome).clone();
                    trimmed.stdout = stdout;
                    trimmed.stderr = stderr;
                    if entry.reset_told {
                        trimmed.reset = None;
                    }
                    (Ended::Ran(Box::new(trimmed)), cut_out || cut_err)
                }
                other => (other.clone(), false),
            };
            let look = Final {
                cell: number,
                ended: shown,
                whole_again,
                detached: entry.detached,
                repeat: entry.collected,
                ran_for: entry.ran_for(),
                output_file: entry.output_file.clone(),
            };
            entry.collected = true;
            if entry.waiters == 0 {
                // Nobody reads its output as it comes any more: the outcome has all of it.
                entry.view = None;
            }
            if !entry.detached {
                cells.remove(&number);
            } else {
                self.record(number, entry);
                self.forget_old(&mut cells);
            }
            return Look::Ended(look);
        }
        // The unfinished lines are shown as they are now, and not counted as seen: their final
        // state comes later.
        let [new_stdout, new_stderr] = match &entry.view {
            Some(view) => view.take_new(&mut entry.seen),
            None => Default::default(),
        };
        entry.detached = true;
        let pending = Pending {
            cell: number,
            queued: entry.started.is_none(),
            blocked_by,
            elapsed: entry.elapsed(),
            new_stdout,
            new_stderr,
            rich_so_far: entry.view.as_ref().map_or(0, LiveView::rich_count),
            reset: entry.reset.clone().filter(|_| !entry.reset_told),
        };
        entry.reset_told |= pending.reset.is_some();
        self.record(number, entry);
        Look::Pending(pending)
    }

    /// Hands cell `number` to an MCP task (its call answered with a task handle, which showed
    /// none of its output): its result will hold all of it, and no `<cell_finished>` notice is
    /// given for it.
    pub fn hand_to_task(&self, number: u64) {
        if let Some(entry) = self.lock().get_mut(&number) {
            entry.detached = true;
            entry.task = true;
            entry.seen = Cursor::default();
        }
    }

    /// Where cell `number` stands, without collecting it (`None` when it is not known).
    pub fn state(&self, number: u64) -> Option<CellState> {
        let cells = self.lock();
        let entry = cells.get(&number)?;
        Some(match &entry.ended {
            Some((ended, _)) => CellState::Ended {
                status: ended.status().to_string(),
                elapsed: entry.elapsed(),
            },
            None if entry.started.is_some() => CellState::Running {
                elapsed: entry.elapsed(),
            },
            None => CellState::Queued {
                blocked_by: cells
                    .iter()
                    .find(|(n, e)| **n < number && e.started.is_some() && e.ended.is_none())
                    .map(|(n, _)| *n),
                elapsed: entry.elapsed(),
            },
        })
    }

    /// A call that looks at cell `number` without waiting (it is unknown or long gone): what
    /// the records say.
    pub fn recorded(&self, number: u64) -> Option<CellRecord> {
        self.records.as_ref()?.read(number)
    }

    /// Notices for detached cells that ended with no call waiting for them and were not
    /// collected or reported yet (except `except`, the cell this result is about), each after
    /// the reset notice of its workspace if no answer told it yet. Each is given once.
    pub fn take_notices(&self, except: Option<u64>) -> Vec<String> {
        let mut cells = self.lock();
        let mut notices = Vec::new();
        let numbers: Vec<u64> = cells
            .iter()
            .filter(|(n, e)| {
                Some(**n) != except
                    && e.detached
                    && !e.task
                    && e.ended.is_some()
                    && e.waiters == 0
                    && !e.collected
                    && !e.reported
            })
            .map(|(n, _)| *n)
            .collect();
        for number in numbers {
            let Some(entry) = cells.get_mut(&number) else {
                continue;
            };
            entry.reported = true;
            if let Some(reset) = entry.reset.clone().filter(|_| !entry.reset_told) {
                // The workspace was rebuilt before it started and no answer said so yet.
                entry.reset_told = true;
                notices.push(reset.notice());
            }
            notices.push(finished_notice(number, entry));
            self.record(number, entry);
        }
        self.forget_old(&mut cells);
        notices
    }

    /// Lets go of ended detached cells the model has had (collected, or told of) beyond the
    /// last [`KEPT_COLLECTED`]: their outcomes can be large.
    fn forget_old(&self, cells: &mut BTreeMap<u64, Entry>) {
        let done: Vec<u64> = cells
            .iter()
            .filter(|(_, e)| e.ended.is_some() && e.waiters == 0 && (e.collected || e.reported))
            .map(|(n, _)| *n)
            .collect();
        let excess = done.len().saturating_sub(KEPT_COLLECTED);
        for number in &done[..excess] {
            cells.remove(number);
        }
    }
}

/// The engine stopped under the cell (the server is going away): it was aborted for the
/// shutdown, or settled unrun.
fn ended_by_stop(settled: &Result<Outcome, EngineError>) -> bool {
    match settled {
        Ok(outcome) => outcome
            .abort
            .as_ref()
            .is_some_and(|abort| matches!(abort.reason, AbortReason::Shutdown)),
        Err(error) => matches!(error, EngineError::Stopped),
    }
}

/// What of `full` comes after the `shown` bytes an earlier result showed, or all of `full`
/// (and true) when `full` does not start with them (the channel went over its cap: it keeps a
/// head and a tail).
fn unseen(full: &str, (shown, over_cap): (usize, bool)) -> (String, bool) {
    if shown == 0 {
        return (full.to_string(), false);
    }
    match full.get(shown..) {
        Some(rest) if !over_cap => (rest.to_string(), false),
        _ => (full.to_string(), true),
    }
}

/// What a detached cell printed so far, as its record keeps it while it runs.
fn so_far(entry: &Entry) -> String {
    let Some(view) = &entry.view else {
        return String::new();
    };
    let [mut text, stderr] = view.so_far();
    if !stderr.is_empty() {
        text.push_str(&format!("\n[stderr]\n{stderr}"));
    }
    text
}

/// The whole outcome of an ended cell as text (images named, not included).
pub fn whole_text(ended: &Ended) -> String {
    match ended {
        Ended::Ran(outcome) => {
            let rendered =
                crate::view::render::render(outcome, crate::view::ImageBudget::TEXT_ONLY, None);
            rendered
                .content
                .iter()
                .filter_map(|block| block.as_text().map(|t| t.text.clone()))
                .collect::<Vec<_>>()
                .join("\n")
        }
        Ended::Failed { message } => message.clone(),
        Ended::Recorded(record) => record.text.clone(),
    }
}

/// `<cell_finished …>` for a cell that ended while nobody was asking.
fn finished_notice(number: u64, entry: &Entry) -> String {
    let Some((ended, _)) = &entry.ended else {
        return String::new();
    };
    let mut lines = Vec::new();
    match ended {
        Ended::Ran(outcome) => {
            let (unseen_out, _) = unseen(&outcome.stdout, entry.shown(Channel::Stdout));
            let tail: Vec<&str> = unseen_out.lines().rev().take(NOTICE_LINES).collect();
            if !tail.is_empty() {
                let skipped = unseen_out.lines().count() - tail.len();
                if skipped > 0 {
                    lines.push(format!("[… {skipped} earlier lines]"));
                }
                lines.extend(tail.into_iter().rev().map(str::to_string));
            }
            if let Some(result) = &outcome.result {
                let short: String = result.chars().take(NOTICE_RESULT_CHARS).collect();
                let more = if result.chars().count() > NOTICE_RESULT_CHARS {
                    " …"
                } else {
                    ""
                };
                lines.push(format!("{short}{more}"));
            }
            if let Some(error) = &outcome.error {
                lines.push(format!("{}: {}", error.ename, error.evalue));
            }
            if let Some(abort) = &outcome.abort {
                lines.push(format!("[aborted: {}]", abort.reason.describe()));
            }
        }
        Ended::Failed { message } => lines.push(message.clone()),
        Ended::Recorded(record) => {
            let tail: Vec<&str> = record.text.lines().rev().take(NOTICE_LINES).collect();
            lines.extend(tail.into_iter().rev().map(str::to_string));
        }
    }
    let mut how = format!(
        "execute {{\"cell\": {number}}} returns its outcome and the output no result showed yet"
    );
    if let Some(file) = &entry.output_file {
        how.push_str(&format!("; full output: {}", file.display()));
    }
    lines.push(format!("[{how}]"));
    let after = entry
        .ran_for()
        .map(|ran| format!(" after={}", super::seconds_text(ran)))
        .unwrap_or_default();
    format!(
        "<cell_finished cell={number} status={}{after}>\n{}\n</cell_finished>",
        ended.status(),
        lines.join("\n")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{ScriptedCell, ok_outcome};

    /// Waits until the book has seen cell `number` end (its events come first).
    async fn ended(book: &CellBook, number: u64) {
        let mut changed = book.watch(number).expect("tracked");
        loop {
            if book.lock().get(&number).is_some_and(|e| e.ended.is_some()) {
                return;
            }
            changed.changed().await.expect("the book keeps the cell");
        }
    }

    #[tokio::test]
    async fn a_bar_whose_line_ends_is_drawn_once_whatever_the_redraw_throttle() {
        // The engine sends a line's final text before the news that it ended; the bar drawn
        // under the final text must go at once, not at the next (throttled) redraw.
        let book = CellBook::new(None, None, "t".into());
        let (handle, cell) = ScriptedCell::new(1);
        book.track(handle, "bar()");
        let reader = book.begin_wait(1, true);
        cell.live.start(None);
        cell.live.push_text(Channel::Stdout, "start\n");
        cell.live.unfinished(Channel::Stderr, " 1/3 #");
        let mut reader = reader.unwrap();
        let (first, _) = book.progress_since(1, &mut reader);
        // Within 100 ms of the last redraw: noted, not drawn.
        cell.live.unfinished(Channel::Stderr, " 2/3 ##");
        let (throttled, _) = book.progress_since(1, &mut reader);
        assert!(throttled.is_empty(), "{throttled:?}");
        cell.live.push_text(Channel::Stderr, " 3/3 ###\n");
        cell.live.unfinished(Channel::Stderr, "");
        cell.settle(ok_outcome(1, " 3/3 ###\n"));
        ended(&book, 1).await;
        let (messages, over) = book.progress_since(1, &mut reader);
        assert!(over);
        let messages = [first, messages].concat();
        let shown = crate::terminal_text::render(&messages.concat(), 4096);
        assert_eq!(shown, "start\n 3/3 ###\n", "{messages:?}");
    }

    #[tokio::test]
    async fn a_detached_cell_shows_only_what_no_answer_showed_yet() {
        let book = CellBook::new(None, None, "t".into());
        let (handle, cell) = ScriptedCell::new(4);
        book.track(handle, "work()");
        book.begin_wait(4, true);
        cell.live.start(None);
        cell.live.push_text(Channel::Stdout, "first\n");
        let mut changed = book.watch(4).unwrap();
        while book.lock()[&4].started.is_none() {
            changed.changed().await.unwrap();
        }
        // The call's wait ends while the cell runs: it answers what is new, and detaches it.
        match book.finish_wait(4) {
            Look::Pending(pending) => {
                assert_eq!(pending.new_stdout, "first\n");
                assert!(!pending.queued);
            }
            _ => panic!("the cell is still running"),
        }
        cell.live.push_text(Channel::Stdout, "second\n");
        cell.settle(Outcome {
            stdout: "first\nsecond\n".into(),
            ..ok_outcome(4, "")
        });
        ended(&book, 4).await;
        book.begin_wait(4, false);
        match book.finish_wait(4) {
            Look::Ended(done) => {
                assert!(done.detached, "it outlived the call that started it");
                match &done.ended {
                    Ended::Ran(outcome) => assert_eq!(outcome.stdout, "second\n"),
                    _ => panic!("it ran"),
                }
            }
            _ => panic!("the cell has ended"),
        }
        assert!(matches!(book.finish_wait(99), Look::Unknown { last: 4 }));
    }

    #[tokio::test]
    async fn a_detached_cell_over_its_cap_is_shown_whole_again_and_a_clear_forgets_what_was_shown()
    {
        let book = CellBook::new(None, None, "t".into());
        for (number, over_cap) in [(5, true), (6, false)] {
            let (handle, cell) = ScriptedCell::new(number);
            book.track(handle, "flood()");
            book.begin_wait(number, true);
            cell.live.start(None);
            cell.live.push_text(Channel::Stdout, "first\n");
            let mut changed = book.watch(number).unwrap();
            while book.lock()[&number].started.is_none() {
                changed.changed().await.unwrap();
            }
            assert!(
                matches!(book.finish_wait(number), Look::Pending(p) if p.new_stdout == "first\n")
            );
            let stdout = if over_cap {
                cell.live.push_text(Channel::Stdout, "second\n");
                cell.live.over_cap(Channel::Stdout);
                "first\n[pi-repl: 9 characters omitted]\nlast\n"
            } else {
                cell.live.clear();
                cell.live.push_text(Channel::Stdout, "after\n");
                "after\n"
            };
            cell.settle(Outcome {
                stdout: stdout.into(),
                ..ok_outcome(number, "")
            });
            ended(&book, number).await;
            book.begin_wait(number, false);
            let Look::Ended(done) = book.finish_wait(number) else {
                panic!("the cell has ended");
            };
            let Ended::Ran(outcome) = &done.ended else {
                panic!("it ran");
            };
            // Over its cap, the outcome is head and tail: the beginning is shown again, said
            // so. After a clear, nothing shown before the clear is taken off the outcome.
            assert_eq!(done.whole_again, over_cap);
            assert_eq!(outcome.stdout, stdout);
        }
    }
}
