//! Loading the kernel-side module into a remote kernel, where nothing can be installed.
//!
//! Owns: the first silent cell sent to a remote kernel. It carries every embedded file of
//! `pi_repl_kernel` (`embedded_package::FILES`) as one JSON string, writes them (once per version)
//! to a private directory on the kernel's machine named after `embedded_package::version_hash`,
//! puts that directory on `sys.path` and calls `pi_repl_kernel.remote.attach`, whose answer
//! (read through `user_expressions`, nothing printed) must name the same version.
//! Does not own: what the module does once loaded (`python/pi_repl_kernel/remote.py`).
//!
//! Invariant: a kernel is handed to the engine only with the module at the host's version.

use std::collections::HashMap;
use std::path::PathBuf;

use jupyter_protocol::{JupyterMessageContent, ReplyStatus};
use tokio::time::{Duration, Instant};

use super::{Kernel, KernelError, KernelEvent};
use crate::python_env::embedded_package;

/// The expression whose value reports what `attach` did.
const ANSWER: &str = "__pi_repl_attached";

/// The loader: `{files}` is a JSON string literal (also a valid Python string literal) and
/// `{version}` the version hash.
const LOADER: &str = r#"
def __pi_repl_load(files, version):
    import json, os, sys, tempfile
    root = os.path.join(tempfile.gettempdir(), "pi-repl-modules-%d" % os.getuid())
    os.makedirs(root, mode=0o700, exist_ok=True)
    base = os.path.join(root, "pi_repl_kernel-" + version)
    if not os.path.isdir(os.path.join(base, "pi_repl_kernel")):
        staging = tempfile.mkdtemp(prefix=".unpacking-", dir=root)
        for relative, text in json.loads(files).items():
            path = os.path.join(staging, relative)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(text)
        try:
            os.rename(staging, base)
        except OSError:
            import shutil
            shutil.rmtree(staging, ignore_errors=True)
    loaded = sys.modules.get("pi_repl_kernel")
    if loaded is not None and getattr(loaded, "__pi_repl_version__", None) != version:
        for name in [n for n in sys.modules if n == "pi_repl_kernel" or n.startswith("pi_repl_kernel.")]:
            del sys.modules[name]
        sys.path[:] = [p for p in sys.path if "pi-repl-modules-" not in p]
    if base not in sys.path:
        sys.path.insert(0, base)
    from pi_repl_kernel import remote
    return remote.attach(version, base)
__pi_repl_attached = __pi_repl_load({files}, "{version}")
del __pi_repl_load
"#;

/// Sends the module and waits until the kernel confirms its version; returns the directory
/// holding the module on the kernel's machine.
pub(super) async fn load(
    kernel: &mut Kernel,
    deadline: Instant,
    boot_timeout: Duration,
) -> Result<PathBuf, KernelError> {
    let version = embedded_package::version_hash();
    let files: HashMap<&str, &str> = embedded_package::FILES.iter().copied().collect();
    let files = serde_json::to_string(&files).map_err(|error| KernelError::Io {
        context: "cannot encode the kernel module".into(),
        source: std::io::Error::other(error),
    })?;
    let files = serde_json::to_string(&files).map_err(|error| KernelError::Io {
        context: "cannot encode the kernel module".into(),
        source: std::io::Error::other(error),
    })?;
    let code = LOADER
        .replace("{files}", &files)
        .replace("{version}", &version);
    // Read and removed in one go: the user's namespace keeps nothing of the loader.
    let expressions = HashMap::from([(
        ANSWER.to_string(),
        format!("__import__('json').dumps(globals().pop('{ANSWER}'))"),
    )]);
    let request = kernel.execute(&code, true, Some(expressions)).await?;
    let reply = loop {
        let event = tokio::time::timeout_at(deadline, kernel.next_event())
            .await
            .map_err(|_| KernelError::BootTimeout {
                after: boot_timeout,
                stderr_tail: Vec::new(),
            })?;
        match event {
            Some(KernelEvent::ShellReply(message))
                if message
                    .parent_header
                    .as_ref()
                    .is_some_and(|parent| parent.msg_id == request) =>
            {
                break message;
            }
            Some(KernelEvent::Exited(exit)) => {
                return Err(failed(format!(
                    "the kernel ended while pi-repl's module was loaded: {}",
                    exit.describe()
                )));
            }
            None => return Err(failed("the kernel's event stream closed".into())),
            Some(_) => {}
        }
    };
    let JupyterMessageContent::ExecuteReply(reply) = reply.content else {
        return Err(failed("unexpected reply to the module's loader".into()));
    };
    if reply.status != ReplyStatus::Ok {
        let why = reply
            .error
            .map(|error| format!("{}: {}", error.ename, error.evalue))
            .unwrap_or_else(|| format!("{:?}", reply.status));
        return Err(failed(format!("loading pi-repl's module raised {why}")));
    }
    let answer = reply
        .user_expressions
        .as_ref()
        .and_then(|expressions| expressions.get(ANSWER))
        .and_then(|result| serde_json::to_value(result).ok())
        .as_ref()
        .and_then(|value| value.get("data"))
        .and_then(|data| data.get("text/plain"))
        .and_then(|text| text.as_str())
        .and_then(parse_repr_json)
        .ok_or_else(|| failed("the module's loader gave no answer".into()))?;
    let loaded = answer.get("version").and_then(|v| v.as_str());
    if loaded != Some(version.as_str()) {
        return Err(failed(format!(
            "the kernel reports module version {loaded:?}, expected {version}"
        )));
    }
    tracing::debug!(%answer, "pi-repl's module is loaded in the remote kernel");
    answer
        .get("module_dir")
        .and_then(|dir| dir.as_str())
        .map(PathBuf::from)
        .ok_or_else(|| failed("the module's loader did not say where it wrote the module".into()))
}

/// The JSON text inside a Python `repr` of a `str` (`'...'`), as `user_expressions` show it.
fn parse_repr_json(repr: &str) -> Option<serde_json::Value> {
    let inner = repr
        .strip_prefix('\'')
        .and_then(|rest| rest.strip_suffix('\''))?;
    // `json.dumps` output is ASCII; its repr only escapes backslashes and quotes.
    let unescaped = inner.replace("\\\\", "\u{0}").replace("\\'", "'");
    serde_json::from_str(&unescaped.replace('\u{0}', "\\")).ok()
}

fn failed(detail: String) -> KernelError {
    KernelError::Io {
        context: "cannot set up pi-repl's module in the remote kernel".into(),
        source: std::io::Error::other(detail),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_json_back_from_a_python_repr() {
        let value =
            parse_repr_json(r#"'{"version": "ab", "module_dir": "/tmp/x\\\\y", "q": "it\'s"}'"#)
                .unwrap();
        assert_eq!(value["version"], "ab");
        assert_eq!(value["module_dir"], "/tmp/x\\y");
        assert_eq!(value["q"], "it's");
    }
}
