//! pi-repl: a persistent, durable Python workspace for AI agents.
//!
//! An agent gets one tool, `execute`, backed by a real ipykernel in its own process. This
//! crate is the host that drives that kernel over the Jupyter protocol and the front doors
//! that expose it.
//!
//! Components (`ARCHITECTURE.md` follows one `execute` call through them):
//!
//! - [`agents`]: sub-agents a cell spawns (`spawn_agent`): limits, child processes, records.
//! - [`host_tools`]: `tools.<name>(...)` in a cell runs a tool of the host agent (pi).
//! - [`cli`]: the `pi-repl` command line (`exec`, `mcp`, `sessions`, `helpers`, `doctor`,
//!   `config`, `setup`).
//! - [`config`]: the user's and the project's configuration files, layered under the
//!   variables and flags, their keys generated from the flags.
//! - [`mcp`]: the `execute` tool over MCP (rmcp, stdio): progress, cancellation, tasks.
//! - [`view`]: what a model is shown of a cell: the outcome as a tool result, images within a
//!   budget (used by the MCP server and by a sub-agent's loop).
//! - [`engine`]: the queue, cells one at a time, aborts and their grace, the silence
//!   watchdog, preparing a kernel (helpers, snapshot store, revive), rebuilding it after it
//!   dies, background saves preempted by cells, reset notices; and its vocabulary:
//!   [`engine::execution`] (one cell as a pure state machine, Jupyter messages in, a record
//!   out), [`engine::output`] (per-channel and per-line caps, head and tail, spill files) and
//!   [`engine::outcome`] (what a cell returns and the events it streams), [`engine::widgets`]
//!   (ipywidgets a cell shows, as text); and the record it keeps for people,
//!   [`engine::notebook`] (the session as an nbformat 4.5 notebook, rewritten after every cell).
//! - [`terminal_text`]: stream text as a terminal shows it (`\r`, `\b`, ANSI erase and
//!   cursor moves): a progress bar is one line, its last state.
//! - [`kernel`]: one ipykernel process: launch over IPC, handshake, socket readers, death.
//! - [`python_env`]: what a kernel needs before it starts: which Python runs it, the per-user
//!   venv, the kernel-side Python package embedded in this binary, Deno and its kernelspec.
//! - [`helpers`]: which helper files a session loads (project, global, default toolbox).
//! - [`session`]: a conversation's directory under `state/`: key, lock, fork, pruning.
//! - [`home`] and [`env_vars`]: where files live, and every environment variable.
//! - [`fsutil`]: atomic writes.

pub mod agents;
pub mod cli;
pub mod config;
pub mod engine;
pub mod env_vars;
pub mod fsutil;
pub mod helpers;
pub mod home;
pub mod host_tools;
pub mod kernel;
pub mod llm;
pub mod mcp;
pub mod python_env;
pub mod session;
pub mod stderr;
pub mod terminal_text;
pub mod view;
