//! The kernel's heap on transparent huge pages: glibc's `glibc.malloc.hugetlb=1` tunable.
//!
//! Why: a durable session forks the kernel at every answer that changed something (the
//! capture, `python/pi_repl_kernel/snapshot/fork.py`), and sub-agents and saves fork it too.
//! `fork()` copies the page tables of everything resident: with 4 KiB pages one entry per page
//! (a 1 GB array is 262 144 of them), with 2 MiB pages one per 512. Measured on the shared
//! 2-core machine (`docs/benchmarks.md`, *Huge pages*): a 1 GB numpy array, fork 84 ms median
//! without, 1.3 ms with.
//!
//! What: the kernel starts with `GLIBC_TUNABLES` holding `glibc.malloc.hugetlb=1`, so glibc's
//! malloc aligns its large mappings and its heap to huge pages and advises them
//! (`MADV_HUGEPAGE`). It takes effect where the system's THP mode is `madvise` or `always`; it
//! is ignored where THP is `never` and by a libc that is not glibc. The user's own
//! `GLIBC_TUNABLES` are kept (ours appended), and a user who set `glibc.malloc.hugetlb` keeps
//! theirs. The kernel side puts the user's value back into `os.environ` at start
//! (`launch.py`), so the processes a cell starts do not inherit ours. Copy-on-write after a
//! fork stays at 4 KiB: Linux (5.8 on) splits a shared huge page at its first write.
//! CPython's small objects are not glibc's: the kernel side folds their arenas onto huge pages
//! itself, between saves (`python/pi_repl_kernel/heap_pages.py`, on when this is).
//! `PI_REPL_HUGE_PAGES=0` turns both off.

use std::ffi::{OsStr, OsString};

/// glibc's variable of tunables (`name=value:name=value`).
pub const TUNABLES_VAR: &str = "GLIBC_TUNABLES";

/// The user's `GLIBC_TUNABLES` as it was (empty: unset), for the kernel side to put back.
pub const ORIGINAL_VAR: &str = "PI_REPL_ORIGINAL_GLIBC_TUNABLES";

const TUNABLE: &str = "glibc.malloc.hugetlb";

/// The variables to set on the kernel for huge pages, given the user's `GLIBC_TUNABLES`:
/// none when the user chose `glibc.malloc.hugetlb` already.
pub fn variables(user: Option<&OsStr>) -> Vec<(OsString, OsString)> {
    let user = user.map(|value| value.to_string_lossy().into_owned());
    let user = user.as_deref().unwrap_or("");
    if user
        .split(':')
        .any(|item| item.split('=').next() == Some(TUNABLE))
    {
        return Vec::new();
    }
    let ours = format!("{TUNABLE}=1");
    let tunables = if user.is_empty() {
        ours
    } else {
        format!("{user}:{ours}")
    };
    vec![
        (TUNABLES_VAR.into(), tunables.into()),
        (ORIGINAL_VAR.into(), user.into()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(vars: Vec<(OsString, OsString)>) -> Vec<(String, String)> {
        vars.into_iter()
            .map(|(k, v)| (k.into_string().unwrap(), v.into_string().unwrap()))
            .collect()
    }

    #[test]
    fn with_no_tunables_of_the_user_ours_is_the_only_one() {
        assert_eq!(
            strings(variables(None)),
            [
                (TUNABLES_VAR.into(), "glibc.malloc.hugetlb=1".into()),
                (ORIGINAL_VAR.into(), String::new())
            ]
        );
    }

    #[test]
    fn the_users_tunables_are_kept_and_ours_appended() {
        let user = OsStr::new("glibc.malloc.arena_max=2");
        assert_eq!(
            strings(variables(Some(user))),
            [
                (
                    TUNABLES_VAR.into(),
                    "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1".into()
                ),
                (ORIGINAL_VAR.into(), "glibc.malloc.arena_max=2".into())
            ]
        );
    }

    #[test]
    fn a_user_who_chose_hugetlb_keeps_their_choice() {
        for user in ["glibc.malloc.hugetlb=0", "a.b=1:glibc.malloc.hugetlb=2"] {
            assert!(variables(Some(OsStr::new(user))).is_empty(), "{user}");
        }
    }
}
