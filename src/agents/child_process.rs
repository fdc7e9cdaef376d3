//! Ending a child's process and learning that it ended: SIGTERM, then SIGKILL after
//! [`TERM_GRACE`], and waiting for its exit without collecting it (`WNOWAIT`), so its record is
//! written before the process is reaped.

use std::time::Duration;

/// How long a child gets between SIGTERM and SIGKILL.
pub const TERM_GRACE: Duration = Duration::from_secs(5);

/// How a child process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Exit {
    Code(i32),
    Signal(i32),
    Unknown,
}

/// Resolves when process `pid` has exited, without collecting it (`WNOWAIT`).
pub(super) async fn exited(pid: Option<u32>) -> Exit {
    let Some(pid) = pid else { return Exit::Unknown };
    let waited = tokio::task::spawn_blocking(move || {
        use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
        loop {
            match waitid(
                Id::Pid(nix::unistd::Pid::from_raw(pid as i32)),
                WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT,
            ) {
                Err(nix::errno::Errno::EINTR) => continue,
                Ok(WaitStatus::Exited(_, code)) => return Exit::Code(code),
                Ok(WaitStatus::Signaled(_, signal, _)) => return Exit::Signal(signal as i32),
                _ => return Exit::Unknown,
            }
        }
    });
    waited.await.unwrap_or(Exit::Unknown)
}

/// SIGTERM, then SIGKILL after [`TERM_GRACE`]; returns once the process has exited.
pub(super) async fn terminate(
    pid: Option<u32>,
    exited: &mut std::pin::Pin<Box<impl std::future::Future<Output = Exit>>>,
) {
    let Some(pid) = pid else { return };
    kill(pid, nix::sys::signal::Signal::SIGTERM);
    if tokio::time::timeout(TERM_GRACE, exited.as_mut())
        .await
        .is_err()
    {
        kill(pid, nix::sys::signal::Signal::SIGKILL);
        exited.as_mut().await;
    }
}

pub(super) fn kill(pid: u32, signal: nix::sys::signal::Signal) {
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), signal);
}
