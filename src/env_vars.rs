//! Every environment variable pi-repl reads, declared once.
//!
//! Each constant's doc is the user-facing documentation; `docs/configuration.md` repeats them in
//! one table. The host reads a setting's variable through clap's `env`, on the field that
//! declares the setting (its flag, default and parser: `cli/*_options.rs`), once, when the
//! command line is parsed; a flag wins over its variable, and a variable over the configuration
//! files (`config`). Read elsewhere: `PI_REPL_CONFIG` (`config::files`), `PI_REPL_HOME`
//! (`home`: also by library callers, and inherited by sub-agents), `PI_REPL_LOG` (the log
//! filter, before anything else), and `PI_REPL_NAMESPACE_UNAVAILABLE` (in the kernel).
//! `PI_REPL_ALLOW_WRITE` is enforced in the kernel; the host reads it (`--allow-write`, hidden)
//! and passes the value in force.

/// Root of every file pi-repl writes (venv, helpers, session state, spilled output).
/// Default: `~/.pi/agent/pi-repl`.
pub const PI_REPL_HOME: &str = "PI_REPL_HOME";

/// The user's configuration file, instead of `~/.pi/agent/pi-repl.toml` (a `.json` file is
/// read as the reference design's `pi-repl.json`). See docs/configuration.md.
pub const PI_REPL_CONFIG: &str = "PI_REPL_CONFIG";

/// The Python interpreter that runs the kernel, overriding the per-user venv (same as `--python`).
pub const PI_REPL_PYTHON: &str = "PI_REPL_PYTHON";

/// How long a kernel may take to boot and answer `kernel_info`, in milliseconds. Default 90000.
pub const PI_REPL_BOOT_TIMEOUT_MS: &str = "PI_REPL_BOOT_TIMEOUT_MS";

/// Silence watchdog: interrupt a cell that prints nothing for this many milliseconds.
/// Default 0 (off).
pub const PI_REPL_TIMEOUT_MS: &str = "PI_REPL_TIMEOUT_MS";

/// How long an interrupted cell may keep running before its kernel is killed, in milliseconds.
/// Default 20000.
pub const PI_REPL_ABORT_GRACE_MS: &str = "PI_REPL_ABORT_GRACE_MS";

/// Characters of stdout (and, separately, of stderr) a cell returns before the middle is
/// replaced by a marker and the full output is spilled to a file. Default 30000.
pub const PI_REPL_MAX_OUTPUT_CHARS: &str = "PI_REPL_MAX_OUTPUT_CHARS";

/// Characters of a result's text `pi-repl mcp` sends: `auto` (default) fits the client
/// (Codex 10000, Claude Code 40000, others no limit), `0` no limit (same as
/// `--max-result-chars`).
pub const PI_REPL_MAX_RESULT_CHARS: &str = "PI_REPL_MAX_RESULT_CHARS";

/// `1` passes credentials from the host's environment to the kernel: variables whose name or value
/// looks like one (`*_API_KEY`, `*_TOKEN`, `DB_PASS`, `ghp_…`, a PEM key, ...: `kernel::secrets`).
/// Default: they are removed, and named in the first result (same as `--pass-credentials`).
pub const PI_REPL_PASS_CREDENTIALS: &str = "PI_REPL_PASS_CREDENTIALS";

/// Comma-separated names of variables passed to the kernel even though they look like
/// credentials (same as `--pass-env NAME`, which adds to them).
pub const PI_REPL_PASS_ENV: &str = "PI_REPL_PASS_ENV";

/// `0` starts a local kernel without a PID namespace of its own, so cells can see (and signal)
/// every process of this user, as `--no-process-isolation` does. Default `1`: cells see only the
/// kernel's processes where Linux allows it (docs/security.md).
pub const PI_REPL_PROCESS_ISOLATION: &str = "PI_REPL_PROCESS_ISOLATION";

/// For tests: the kernel side behaves as where namespaces are unavailable, with this value as
/// the reason (read by `python/pi_repl_kernel/namespace.py`, not by the host).
pub const PI_REPL_NAMESPACE_UNAVAILABLE: &str = "PI_REPL_NAMESPACE_UNAVAILABLE";

/// `0` stops commands from creating the per-user venv by themselves when it is missing; they
/// then fail with a hint to run `pi-repl setup`. Default: the venv is created on first use.
pub const PI_REPL_AUTO_SETUP: &str = "PI_REPL_AUTO_SETUP";

/// Directories (`:`-separated) the kernel's default `write` and `edit` may write to besides the
/// session's working directory, or `*` for anywhere. Enforced by the kernel's toolbox
/// (`python/pi_repl_kernel/toolbox_support.py`); the host passes it on (key `allow-write`).
/// Default: the working directory only.
pub const PI_REPL_ALLOW_WRITE: &str = "PI_REPL_ALLOW_WRITE";

/// Longest side, in pixels, of an image the MCP server shows the model. Default 1568.
pub const PI_REPL_IMAGE_MAX_SIDE: &str = "PI_REPL_IMAGE_MAX_SIDE";

/// Images the MCP server shows the model per call; more are saved and listed. Default 4.
pub const PI_REPL_IMAGE_MAX_COUNT: &str = "PI_REPL_IMAGE_MAX_COUNT";

/// How often the MCP server sends a progress notification during a silent cell, so clients
/// that reset their request timer on progress keep waiting, in milliseconds. Default 10000.
pub const PI_REPL_HEARTBEAT_MS: &str = "PI_REPL_HEARTBEAT_MS";

/// Largest stored size of one binding in a snapshot, in MiB; bigger ones are skipped and named.
/// Default 2048.
pub const PI_REPL_SNAPSHOT_MAX_BINDING_MB: &str = "PI_REPL_SNAPSHOT_MAX_BINDING_MB";

/// Largest stored size of a whole snapshot, in MiB; over it the largest changed bindings are
/// skipped and named. Default 8192.
pub const PI_REPL_SNAPSHOT_MAX_TOTAL_MB: &str = "PI_REPL_SNAPSHOT_MAX_TOTAL_MB";

/// Largest size, in MiB, that the kept states of a durable session's answered cells (what
/// `execute {"rewind": N}` returns to) may take beyond the current snapshot; older states go
/// first. The newest 100 are kept at most. 0 keeps only the states the current snapshot's
/// blobs hold. Default 8192.
pub const PI_REPL_REWIND_MAX_MB: &str = "PI_REPL_REWIND_MAX_MB";

/// Interval of the periodic snapshot refresh that catches in-place mutation, in milliseconds;
/// 0 disables it. Default 120000.
pub const PI_REPL_SNAPSHOT_REFRESH_MS: &str = "PI_REPL_SNAPSHOT_REFRESH_MS";

/// `0` starts the kernel without glibc's huge-page tunable (`glibc.malloc.hugetlb=1` in
/// `GLIBC_TUNABLES`). Default `1`: its heap is on transparent huge pages where the system allows
/// them, so forking it for a save copies 512 times fewer page-table entries (`kernel::huge_pages`).
pub const PI_REPL_HUGE_PAGES: &str = "PI_REPL_HUGE_PAGES";

/// Whether background snapshots are saved by a forked child of the kernel (`1`, the default)
/// or in the kernel process itself (`0`: a cell that arrives stops the save, as before).
pub const PI_REPL_SNAPSHOT_FORK: &str = "PI_REPL_SNAPSHOT_FORK";

/// Whether a revive reinstalls the packages a durable session added that the kernel's
/// environment lacks (`1`, the default), before its bindings come back; `0`: the reset notice
/// names them, the bindings that need them, and the command that installs them.
pub const PI_REPL_REINSTALL_PACKAGES: &str = "PI_REPL_REINSTALL_PACKAGES";

/// How long a snapshot save child may run before it is killed and the save retried later, in
/// milliseconds. Default 600000 (10 minutes).
pub const PI_REPL_SNAPSHOT_CHILD_LIMIT_MS: &str = "PI_REPL_SNAPSHOT_CHILD_LIMIT_MS";

/// How long an MCP call waits for its cell before answering `running` (the cell goes on):
/// milliseconds, or `end` to wait for the end. Default 50000.
pub const PI_REPL_WAIT_MS: &str = "PI_REPL_WAIT_MS";

/// The API of the host-side endpoint that answers `llm_query` when the MCP client cannot:
/// `openai` (chat completions, also for compatible servers) or `anthropic` (Messages). Same as
/// `--llm-api`. Default `openai`.
pub const PI_REPL_LLM_API: &str = "PI_REPL_LLM_API";

/// Base URL of that endpoint (`http://127.0.0.1:11434/v1`); needs a model. Same as
/// `--llm-base-url`. Default: the API's own (`https://api.openai.com/v1`,
/// `https://api.anthropic.com`).
pub const PI_REPL_LLM_BASE_URL: &str = "PI_REPL_LLM_BASE_URL";

/// The model asked at that endpoint; setting it turns the endpoint on. Same as `--llm-model`.
pub const PI_REPL_LLM_MODEL: &str = "PI_REPL_LLM_MODEL";

/// The endpoint's key, read by pi-repl from its own environment and never passed to the kernel
/// (it is removed from the kernel's environment like every credential). Unset: no auth header.
pub const PI_REPL_LLM_API_KEY: &str = "PI_REPL_LLM_API_KEY";

/// The name of the variable holding the endpoint's key instead of `PI_REPL_LLM_API_KEY`
/// (`OPENAI_API_KEY`, ...). Same as `--llm-api-key-env`.
pub const PI_REPL_LLM_API_KEY_ENV: &str = "PI_REPL_LLM_API_KEY_ENV";

/// Model requests one cell may make. Same as `--llm-max-calls-per-cell`. Default 200.
pub const PI_REPL_LLM_MAX_CALLS_PER_CELL: &str = "PI_REPL_LLM_MAX_CALLS_PER_CELL";

/// Model requests a session may make in all. Same as `--llm-max-calls`. Default 5000.
pub const PI_REPL_LLM_MAX_CALLS: &str = "PI_REPL_LLM_MAX_CALLS";

/// Input plus output tokens a session's model requests may use in all. Same as
/// `--llm-max-tokens`. Default 20000000.
pub const PI_REPL_LLM_MAX_TOKENS: &str = "PI_REPL_LLM_MAX_TOKENS";

/// Largest prompt sent to a model, in estimated tokens (4 characters each); a larger one is an
/// error naming its size. Same as `--llm-max-prompt-tokens`. Default 150000.
pub const PI_REPL_LLM_MAX_PROMPT_TOKENS: &str = "PI_REPL_LLM_MAX_PROMPT_TOKENS";

/// How long one model request may take, in milliseconds. Same as `--llm-timeout-ms`.
/// Default 300000.
pub const PI_REPL_LLM_TIMEOUT_MS: &str = "PI_REPL_LLM_TIMEOUT_MS";

/// The Jupyter Server token for `--jupyter-url` (same as `--jupyter-token`, which is visible to
/// other local users in the process list; this variable is not). Read by the host only: it is
/// withheld from a local kernel's environment, and never logged or shown.
pub const JUPYTER_TOKEN: &str = "JUPYTER_TOKEN";

/// Jupyter's own: `:`-separated data directories whose `kernels/` `--kernel NAME` searches (after
/// pi-repl's own `PI_REPL_HOME/jupyter`, before the user's and the system's).
pub const JUPYTER_PATH: &str = "JUPYTER_PATH";

/// Jupyter's own: the user's data directory (default `~/.local/share/jupyter`), searched by
/// `--kernel NAME`.
pub const JUPYTER_DATA_DIR: &str = "JUPYTER_DATA_DIR";

/// With `--jupyter-url`: a directory on the kernel's machine where durable sessions keep their
/// snapshots (`<dir>/<session>/snapshot`; the installation's snapshot key is copied to
/// `<dir>/snapshot.key`, 0600). Default: the session's own paths under `PI_REPL_HOME`, which
/// the kernel's machine must then see (the same machine or a shared home).
pub const PI_REPL_REMOTE_SNAPSHOT_DIR: &str = "PI_REPL_REMOTE_SNAPSHOT_DIR";

/// How deep sub-agents may nest: a workspace at this depth cannot `spawn_agent`. Default 2
/// (the session's children and their children).
pub const PI_REPL_AGENT_MAX_DEPTH: &str = "PI_REPL_AGENT_MAX_DEPTH";

/// Sub-agents one workspace may have running at once. Default 4.
pub const PI_REPL_AGENT_MAX_RUNNING: &str = "PI_REPL_AGENT_MAX_RUNNING";

/// Log filter for pi-repl's own diagnostics on stderr (`warn`, `info`, `debug`, ...).
/// Default `warn`.
pub const PI_REPL_LOG: &str = "PI_REPL_LOG";
