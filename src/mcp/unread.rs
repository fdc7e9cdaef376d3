//! How much of what the server wrote to stdout the client has not read yet.
//!
//! Owns one question about the stdout file descriptor: how many bytes sit between the server
//! and the client. The frame guard's writer asks it before a response that follows a progress
//! notification (see `frames`): once nothing is left unread, the client has taken the progress
//! in a read of its own, before the response is even written.
//!
//! A pipe answers with `FIONREAD` (bytes in the pipe). A socket (Node, and so Claude Code,
//! gives a child socketpairs for its stdio) answers on Linux with `SIOCOUTQ` (bytes sent and
//! not yet consumed by the peer). Anything else (a file, a terminal, another system) cannot
//! say: `None`, and the caller falls back to a pause.

use std::os::fd::{AsRawFd, BorrowedFd};

/// Bytes written to `fd` that its reader has not read yet; `None` when `fd` cannot tell.
pub fn unread_bytes(fd: BorrowedFd<'_>) -> Option<u64> {
    let stat = nix::sys::stat::fstat(fd).ok()?;
    let kind = stat.st_mode & nix::libc::S_IFMT;
    if kind == nix::libc::S_IFIFO {
        return queued(fd, nix::libc::FIONREAD);
    }
    #[cfg(target_os = "linux")]
    if kind == nix::libc::S_IFSOCK {
        // SIOCOUTQ, which Linux defines as TIOCOUTQ.
        return queued(fd, nix::libc::TIOCOUTQ);
    }
    None
}

/// An ioctl that reports a byte count as an `int`.
fn queued(fd: BorrowedFd<'_>, request: nix::libc::Ioctl) -> Option<u64> {
    let mut count: nix::libc::c_int = 0;
    // SAFETY: `fd` is a valid open descriptor for the duration of the call (it is borrowed),
    // and both requests write exactly one `int` through the pointer, which points at `count`.
    let status = unsafe { nix::libc::ioctl(fd.as_raw_fd(), request, &mut count) };
    if status == 0 {
        u64::try_from(count).ok()
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::fd::AsFd;

    #[test]
    fn a_pipe_counts_what_its_reader_has_not_read() {
        let (mut reader, mut writer) = std::io::pipe().unwrap();
        assert_eq!(unread_bytes(writer.as_fd()), Some(0));
        writer.write_all(b"hello\n").unwrap();
        assert_eq!(unread_bytes(writer.as_fd()), Some(6));
        let mut buf = [0u8; 6];
        reader.read_exact(&mut buf).unwrap();
        assert_eq!(unread_bytes(writer.as_fd()), Some(0));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_socket_counts_what_its_peer_has_not_consumed() {
        let (mut ours, mut theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        assert_eq!(unread_bytes(ours.as_fd()), Some(0));
        ours.write_all(b"hello\n").unwrap();
        assert!(unread_bytes(ours.as_fd()).unwrap() > 0);
        let mut buf = [0u8; 6];
        theirs.read_exact(&mut buf).unwrap();
        assert_eq!(unread_bytes(ours.as_fd()), Some(0));
    }

    #[test]
    fn a_file_cannot_tell() {
        let file = tempfile::tempfile().unwrap();
        assert_eq!(unread_bytes(file.as_fd()), None);
    }
}
