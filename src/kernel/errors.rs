//! Why a kernel could not be started (`KernelError`), with what the user can do about it and
//! the last lines the kernel wrote to stderr.

use std::time::Duration;

use super::exit::KernelExit;
use crate::python_env::interpreter::Interpreter;

/// Why a kernel could not be started.
#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    #[error("cannot start {}: {source}", python.describe())]
    Spawn {
        python: Interpreter,
        #[source]
        source: std::io::Error,
    },
    #[error("{} cannot run the kernel: {detail}", python.describe())]
    MissingKernel { python: Interpreter, detail: String },
    #[error("the kernel exited while starting: {}{}", exit.describe(), stderr_suffix(stderr_tail))]
    ExitedDuringBoot {
        exit: KernelExit,
        stderr_tail: Vec<String>,
    },
    #[error("the kernel did not become ready within {:.0} s{}", after.as_secs_f64(), stderr_suffix(stderr_tail))]
    BootTimeout {
        after: Duration,
        stderr_tail: Vec<String>,
    },
    #[error("the Jupyter server at {server}: {detail}")]
    Remote { server: String, detail: String },
    #[error("the kernelspec `{name}`: {detail}")]
    Kernelspec { name: String, detail: String },
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}

impl KernelError {
    /// What the user can do about it.
    pub fn hint(&self) -> Option<String> {
        match self {
            KernelError::Spawn { python, .. } | KernelError::MissingKernel { python, .. } => {
                Some(python.missing_kernel_hint())
            }
            KernelError::BootTimeout { .. } => Some(format!(
                "a slow machine or a hanging import can cause this; raise {} (milliseconds) \
                 or check the kernel's stderr above",
                crate::env_vars::PI_REPL_BOOT_TIMEOUT_MS
            )),
            KernelError::ExitedDuringBoot { .. } => Some(
                "check the kernel's stderr above; `pi-repl setup --force` rebuilds the environment"
                    .to_string(),
            ),
            KernelError::Remote { .. } => Some(
                "check --jupyter-url (the server's base URL) and the token (--jupyter-token or \
                 JUPYTER_TOKEN); `jupyter server list` on the server's machine shows both; for \
                 https with a private certificate authority, set SSL_CERT_FILE to its certificate"
                    .to_string(),
            ),
            KernelError::Kernelspec { name, .. } => Some(if name == "deno" {
                "`pi-repl setup --deno` installs Deno and its kernelspec".to_string()
            } else {
                format!("reinstall the kernel `{name}` or fix its kernel.json")
            }),
            KernelError::Io { .. } => None,
        }
    }
}

fn stderr_suffix(lines: &[String]) -> String {
    if lines.is_empty() {
        String::new()
    } else {
        format!("\nkernel stderr (last lines):\n  {}", lines.join("\n  "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_boot_failure_shows_the_kernels_last_lines_and_says_what_to_do() {
        let error = KernelError::BootTimeout {
            after: Duration::from_secs(61),
            stderr_tail: vec!["ImportError: no module named x".into()],
        };
        assert_eq!(
            error.to_string(),
            "the kernel did not become ready within 61 s\nkernel stderr (last lines):\n  \
             ImportError: no module named x"
        );
        assert!(
            error
                .hint()
                .is_some_and(|hint| hint.contains("PI_REPL_BOOT_TIMEOUT_MS"))
        );
        let quiet = KernelError::Kernelspec {
            name: "deno".into(),
            detail: "not installed".into(),
        };
        assert_eq!(quiet.to_string(), "the kernelspec `deno`: not installed");
        assert!(
            quiet
                .hint()
                .is_some_and(|hint| hint.contains("setup --deno"))
        );
    }
}
