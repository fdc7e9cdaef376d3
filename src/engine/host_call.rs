//! Host calls: the engine's own silent cells into the kernel-side module.
//!
//! A host call runs `pi_repl_kernel.host.call(module, function, args)` as a *silent* cell
//! (no execution count, nothing bound in the user's namespace) and reads the JSON result from a
//! user expression in the `execute_reply`, so results never mix with what the called code
//! prints (which is dropped). Used to load helpers and, later, for snapshots.
//!
//! Every host call is bounded: past its limit the kernel process (not its group: the user's
//! processes are not the host's to signal) gets SIGINT, and if it still does not settle within
//! `INTERRUPT_GRACE` the caller is told to replace the kernel.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::engine::execution::CellRun;
use crate::engine::output::OutputLimits;
use crate::kernel::{Kernel, KernelEvent, KernelExit};

/// How long an interrupted host call may take to stop before the kernel is replaced.
pub const INTERRUPT_GRACE: Duration = Duration::from_secs(5);

/// The user expression that carries a host call's result.
const REPLY_EXPRESSION: &str = r#"__import__("pi_repl_kernel.host", fromlist=["reply"]).reply()"#;

/// Why a host call gave no result.
#[derive(Debug, thiserror::Error)]
pub enum HostCallError {
    #[error("{ename}: {evalue}")]
    Raised { ename: String, evalue: String },
    #[error("the kernel sent no result")]
    NoResult,
    #[error("the kernel's result is not JSON: {0}")]
    BadResult(String),
    #[error("{}", .0.describe())]
    Died(KernelExit),
    /// It was interrupted (its limit passed, or the caller asked) and stopped in time.
    #[error("interrupted")]
    Interrupted,
    /// It was interrupted and did not stop: the kernel must be replaced.
    #[error("it did not stop when interrupted")]
    Wedged,
    /// Its limit passed (with `OnLimit::GiveUp`); it may still be running.
    #[error("it did not finish in time")]
    TimedOut,
    #[error("cannot send the call: {0}")]
    Send(String),
}

/// The Python code of a call to `pi_repl_kernel.<module>.<function>(*args)`.
pub fn call_code(module: &str, function: &str, args: &Value) -> String {
    // The arguments travel as a JSON text inside a Python string literal; a JSON string
    // literal is a valid Python one (serde_json escapes quotes, backslashes and controls).
    let args_literal = serde_json::to_string(&args.to_string()).unwrap_or_else(|_| "\"[]\"".into());
    format!(
        r#"__import__("pi_repl_kernel.host", fromlist=["call"]).call({}, {}, {args_literal})"#,
        serde_json::Value::from(module),
        serde_json::Value::from(function)
    )
}

/// What happens when a host call's limit passes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnLimit {
    /// Interrupt the kernel and wait `INTERRUPT_GRACE` for the call to stop.
    Interrupt,
    /// Return `HostCallError::TimedOut` at once, leaving the kernel as it is (the caller will
    /// kill it, e.g. so a revive's journal shows which binding hung).
    GiveUp,
}

/// Runs one host call. `limit` bounds it; `interrupt`, when cancelled, interrupts it early.
pub async fn host_call(
    kernel: &mut Kernel,
    module: &str,
    function: &str,
    args: Value,
    limit: Duration,
    interrupt: Option<&CancellationToken>,
) -> Result<Value, HostCallError> {
    host_call_with(
        kernel,
        module,
        function,
        args,
        limit,
        OnLimit::Interrupt,
        interrupt,
    )
    .await
}

/// `host_call` with a choice of what happens at the limit.
pub async fn host_call_with(
    kernel: &mut Kernel,
    module: &str,
    function: &str,
    args: Value,
    limit: Duration,
    on_limit: OnLimit,
    interrupt: Option<&CancellationToken>,
) -> Result<Value, HostCallError> {
    let code = call_code(module, function, &args);
    let expressions = HashMap::from([("reply".to_string(), REPLY_EXPRESSION.to_string())]);
    let msg_id = kernel
        .execute(&code, true, Some(expressions))
        .await
        .map_err(|e| HostCallError::Send(e.to_string()))?;
    let mut run = CellRun::new(msg_id, OutputLimits::default(), None);
    let deadline = Instant::now() + limit;
    let mut interrupted_at: Option<Instant> = None;
    let never = CancellationToken::new();
    let interrupt = interrupt.unwrap_or(&never);
    loop {
        if run.is_settled() {
            break;
        }
        let grace_end = interrupted_at.map(|at| at + INTERRUPT_GRACE);
        tokio::select! {
            biased;
            event = kernel.next_event() => match event {
                Some(KernelEvent::IoPub(message)) => {
                    if run.owns(&message) {
                        run.on_iopub(&message);
                    } else {
                        kernel.set_aside(message);
                    }
                }
                Some(KernelEvent::ShellReply(message)) => {
                    // What a host call would page (none does) is not the user's output.
                    run.on_shell_reply(&message);
                }
                Some(KernelEvent::StdinRequest(message)) => {
                    let refusal = crate::llm::kernel_requests::refusal(&message);
                    if let Err(error) = kernel.reply_stdin(&message, refusal).await {
                        tracing::debug!(%error, "could not refuse a stdin request");
                    }
                }
                Some(KernelEvent::Exited(exit)) => return Err(HostCallError::Died(exit)),
                None => return Err(HostCallError::NoResult),
            },
            _ = tokio::time::sleep_until(deadline), if interrupted_at.is_none() => {
                if on_limit == OnLimit::GiveUp {
                    return Err(HostCallError::TimedOut);
                }
                kernel.interrupt_kernel_only();
                interrupted_at = Some(Instant::now());
            }
            _ = interrupt.cancelled(), if interrupted_at.is_none() => {
                kernel.interrupt_kernel_only();
                interrupted_at = Some(Instant::now());
            }
            _ = sleep_until_opt(grace_end), if grace_end.is_some() => {
                return Err(HostCallError::Wedged);
            }
        }
    }
    let record = run.finish();
    if let Some(error) = record.error {
        if interrupted_at.is_some() && error.ename == "KeyboardInterrupt" {
            return Err(HostCallError::Interrupted);
        }
        return Err(HostCallError::Raised {
            ename: error.ename,
            evalue: error.evalue,
        });
    }
    let text = record
        .expressions
        .get("reply")
        .ok_or(HostCallError::NoResult)?;
    serde_json::from_str(text).map_err(|e| HostCallError::BadResult(format!("{e}: {text}")))
}

async fn sleep_until_opt(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_a_json_text_inside_a_python_string() {
        let code = call_code(
            "helpers",
            "load",
            &serde_json::json!(["/p/it's \"q\"\\n.py"]),
        );
        assert_eq!(
            code,
            r#"__import__("pi_repl_kernel.host", fromlist=["call"]).call("helpers", "load", "[\"/p/it's \\\"q\\\"\\\\n.py\"]")"#
        );
    }
}
