//! Bringing a fresh kernel to a ready workspace: start it, then load the helpers.
//!
//! Owns: the order of what happens after a kernel starts, and surviving a helper that breaks
//! it. A helper that raises at import fails alone (its record carries the error); one that
//! hangs is interrupted after `HELPER_LOAD_LIMIT`; one that kills the kernel (or cannot be
//! interrupted) is skipped from then on and the workspace is prepared again without it.
//! Everything is bounded by the boot timeout.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::json;
use tokio::time::Instant;

use super::EngineConfig;
use super::host_call::{HostCallError, host_call};
use crate::helpers::{LoadError, LoadRecord};
use crate::kernel::{Kernel, KernelError, KilledBy};

/// How long one helper file may take to load before it is interrupted.
pub const HELPER_LOAD_LIMIT: Duration = Duration::from_secs(30);

/// A ready kernel and what loading its helpers did.
pub(super) struct Prepared {
    pub kernel: Kernel,
    /// One record per helper file, in load order (failed ones included).
    pub helpers: Vec<LoadRecord>,
}

/// Starts a kernel and loads the helpers into it. `broken` remembers helpers that killed a
/// kernel, with the reason, across calls: they are not loaded again.
pub(super) async fn prepare(
    config: &EngineConfig,
    broken: &mut HashMap<PathBuf, String>,
) -> Result<Prepared, KernelError> {
    let deadline = Instant::now() + config.boot_timeout;
    'attempt: loop {
        let remaining = deadline.saturating_duration_since(Instant::now());
        let mut kernel = Kernel::start(&config.kernel, remaining).await?;
        let mut helpers = Vec::new();
        for path in &config.helpers {
            if let Some(reason) = broken.get(path) {
                helpers.push(failed(path, "HelperBrokeTheKernel", reason));
                continue;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                kernel.kill(KilledBy::Host);
                return Err(KernelError::BootTimeout {
                    after: config.boot_timeout,
                    stderr_tail: kernel.stderr_tail(),
                });
            }
            let limit = HELPER_LOAD_LIMIT.min(left);
            match host_call(&mut kernel, "helpers", "load", json!([path]), limit, None).await {
                Ok(value) => match serde_json::from_value::<LoadRecord>(value) {
                    Ok(record) => helpers.push(record),
                    Err(error) => helpers.push(failed(path, "BadRecord", &error.to_string())),
                },
                Err(HostCallError::Died(exit)) => {
                    let reason = format!("loading it ended the kernel: {}", exit.describe());
                    tracing::warn!(helper = %path.display(), %reason, "skipping a helper");
                    broken.insert(path.clone(), reason);
                    continue 'attempt;
                }
                Err(HostCallError::Wedged) => {
                    let reason = format!(
                        "it hung at import and did not stop when interrupted after {} s",
                        limit.as_secs()
                    );
                    tracing::warn!(helper = %path.display(), %reason, "skipping a helper");
                    broken.insert(path.clone(), reason);
                    kernel.kill(KilledBy::Host);
                    continue 'attempt;
                }
                Err(error) => helpers.push(failed(path, "LoadFailed", &error.to_string())),
            }
        }
        return Ok(Prepared { kernel, helpers });
    }
}

fn failed(path: &std::path::Path, kind: &str, message: &str) -> LoadRecord {
    LoadRecord {
        file: path.display().to_string(),
        summary: None,
        functions: Vec::new(),
        error: Some(LoadError {
            kind: kind.to_string(),
            message: message.to_string(),
            line: None,
            text: String::new(),
        }),
    }
}
