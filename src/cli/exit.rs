//! Every exit code a `pi-repl` command ends with, as one enum.
//!
//! Owns: the number behind each way a command can end. Every command returns an [`Exit`] (or a
//! `Failure` carrying one); only `cli::main` turns it into the process's exit code. The table in
//! `docs/cli.md` ("Exit codes") lists the same codes: change both together.

use crate::engine::outcome::Status;

/// How a command ended, and so the process's exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// 0: the command did what it was asked; every cell ran without error.
    Success,
    /// 1: a cell raised an exception (`exec`).
    CellRaised,
    /// 1: `doctor` found at least one problem.
    ProblemsFound,
    /// 2: bad usage: an unknown flag, a bad value from a flag or an environment variable, a
    /// missing `--cwd`, a nonexistent `--python`, an unknown session.
    Usage,
    /// 3: a cell was aborted (`--timeout`, Ctrl-C, the silence watchdog).
    CellAborted,
    /// 4: the kernel died while a cell ran.
    KernelDied,
    /// 5: pi-repl itself could not do its work (no usable interpreter, the kernel did not
    /// start, setup failed, a file could not be written).
    Failure,
    /// 130: interrupted twice with Ctrl-C (128 + SIGINT), the shell's convention.
    Interrupted,
    /// 141: stdout was closed by its reader (`| head`): 128 + SIGPIPE, what a shell reports
    /// for a writer ended by a closed pipe.
    StdoutClosed,
}

impl Exit {
    /// The process exit code.
    pub fn code(self) -> u8 {
        match self {
            Exit::Success => 0,
            Exit::CellRaised | Exit::ProblemsFound => 1,
            Exit::Usage => 2,
            Exit::CellAborted => 3,
            Exit::KernelDied => 4,
            Exit::Failure => 5,
            Exit::Interrupted => 130,
            Exit::StdoutClosed => 141,
        }
    }

    /// The exit for the worst status among a command's cells.
    pub fn for_cells(worst: Status) -> Exit {
        match worst {
            Status::Ok => Exit::Success,
            Status::Error => Exit::CellRaised,
            Status::Aborted => Exit::CellAborted,
            Status::Died => Exit::KernelDied,
        }
    }
}

impl From<Exit> for std::process::ExitCode {
    fn from(exit: Exit) -> std::process::ExitCode {
        std::process::ExitCode::from(exit.code())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worse_cell_status_never_gives_a_smaller_code() {
        let codes: Vec<u8> = [Status::Ok, Status::Error, Status::Aborted, Status::Died]
            .into_iter()
            .map(|status| Exit::for_cells(status).code())
            .collect();
        assert_eq!(codes, vec![0, 1, 3, 4]);
    }

    #[test]
    fn the_signal_conventions_are_128_plus_the_signal() {
        assert_eq!(Exit::Interrupted.code(), 128 + nix::libc::SIGINT as u8);
        assert_eq!(Exit::StdoutClosed.code(), 128 + nix::libc::SIGPIPE as u8);
    }
}
