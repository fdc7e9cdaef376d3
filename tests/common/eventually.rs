//! Waiting for what a test is about, never for a length of time: the one "eventually" helper
//! of the Rust tests (issue 24).
//!
//! A test that needs something to have happened (a file written, a pid gone, a process
//! exited, a manifest committed) states it as a check and waits until the check holds. The
//! limit only turns a hang into a failure that names what never happened; it is generous,
//! since a kernel start on a busy 2-core machine takes seconds, and nothing is asserted about
//! how soon the check held (timings are benchmarks).
//!
//! A check returns `bool` or `Option<T>` (`Some` hands the value it found to the test).
//! `eventually` blocks its thread between looks; on a tokio runtime (the engine's tests) use
//! `eventually_async`, so the engine the test waits for keeps running on the same runtime.
//!
//! Not for sleeps that are the workload (a cell that sleeps to stay running, a client that
//! reads slowly on purpose, a signal sent at a chosen moment): those say so where they are.
#![allow(dead_code)]

use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

/// How long a check rests between looks: short beside anything a test waits for, long enough
/// that polling costs a busy machine nothing.
const LOOK_AGAIN: Duration = Duration::from_millis(20);

/// What a check says: not yet (`false`, `None`), or done, with what it found.
pub trait Check {
    type Found;
    fn found(self) -> Option<Self::Found>;
}

impl Check for bool {
    type Found = ();
    fn found(self) -> Option<()> {
        self.then_some(())
    }
}

impl<T> Check for Option<T> {
    type Found = T;
    fn found(self) -> Option<T> {
        self
    }
}

/// Looks at `check` until it holds and returns what it found; `None` once `limit` passed
/// without it holding (for a test that asserts with its own message, or that expects "never").
pub fn poll<C: Check>(limit: Duration, mut check: impl FnMut() -> C) -> Option<C::Found> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(found) = check().found() {
            return Some(found);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(LOOK_AGAIN);
    }
}

/// Waits until `check` holds and returns what it found; fails the test saying `what` did
/// not happen within `limit`.
pub fn eventually<C: Check>(what: &str, limit: Duration, check: impl FnMut() -> C) -> C::Found {
    poll(limit, check).unwrap_or_else(|| panic!("{what}: did not happen within {limit:?}"))
}

/// `eventually` on a tokio runtime: rests with `tokio::time::sleep`, so the engine under test
/// (on the same runtime) goes on while the test waits.
pub async fn eventually_async<C: Check>(
    what: &str,
    limit: Duration,
    mut check: impl FnMut() -> C,
) -> C::Found {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(found) = check().found() {
            return found;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: did not happen within {limit:?}"
        );
        tokio::time::sleep(LOOK_AGAIN).await;
    }
}

/// Waits until `child` exits and returns its status; `None` if it still runs after `limit`.
pub fn exited(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    poll(limit, || child.try_wait().expect("waiting for a child"))
}
