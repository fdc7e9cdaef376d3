"""pi-repl default helper: ``bash``.

A helper file like any user's (see docs/helpers.md): self-contained, standard library only.

Invariant: every command runs in a process group of its own, and if ``bash`` does not return
normally (timeout, ``KeyboardInterrupt`` from an aborted cell, any other exception) that whole
group is ended (SIGTERM, ``KILL_GRACE`` seconds, SIGKILL) before the exception leaves ``bash``.
The host's SIGINT reaches only the kernel's own process group, so without this a command's
children would outlive the cell. A command (and what it starts) also ends with the kernel: it
inherits the kernel's ``PI_REPL_KERNEL_TAG``, and every process carrying it is killed when the
kernel exits, is replaced, or loses its host (see docs/cli.md, "Processes a cell started").
"""

import os
import selectors
import signal
import subprocess
import time

helper_description = (
    "Run a shell command; returns a CompletedProcess (.stdout, .stderr, .returncode), "
    "even when it fails."
)

CAPTURE_HEAD_BYTES = 5 * 1024 * 1024
CAPTURE_TAIL_BYTES = 5 * 1024 * 1024
"""Per stream, ``bash`` keeps the first and the last 5 MiB of output and drops the middle (saying
so in the text), so a command printing gigabytes cannot fill the kernel's memory."""

KILL_GRACE = 1.0
"""Seconds between SIGTERM and SIGKILL when a command's process group is ended."""

BACKGROUND_GRACE = 0.5
"""Seconds ``bash`` keeps reading after the shell exits while a background process still holds
its output pipes open; then it returns, leaving that process running."""

_CHUNK = 64 * 1024
_POLL = 0.1  # how often the loop checks the shell's exit while pipes are still open


def bash(command, timeout=None, cwd=None):
    """Run ``command`` with ``/bin/bash -c`` (``/bin/sh`` if there is no bash) and capture it.

    Arguments:
        command: one string of shell code (pipes, ``&&``, redirections, globs all work). To
            pass a list of arguments safely, quote it: ``bash(shlex.join(["grep", "-n", p, f]))``.
        timeout: seconds; when they run out the command and everything it started is ended and
            ``subprocess.TimeoutExpired`` is raised (its ``.output``/``.stderr`` hold what was
            printed so far). ``None`` waits however long it takes.
        cwd: the directory to run in (default: the kernel's current directory).

    Returns a ``subprocess.CompletedProcess``: ``.args`` (the command), ``.returncode`` (negative:
    killed by that signal), ``.stdout`` and ``.stderr`` (separate ``str``, decoded as UTF-8 with
    undecodable bytes replaced). A non-zero exit status does **not** raise; check it::

        result = bash("make test")
        if result.returncode != 0:
            print(result.stderr[-2000:])
        bash("git diff --quiet").check_returncode()   # raises CalledProcessError if non-zero

    Behaviour:
        - stdin is ``/dev/null`` (nothing can wait for input); the shell is not a login shell, so
          aliases and functions from ``~/.bashrc`` are not defined.
        - The command runs in its own process group. On timeout, or when the cell is interrupted
          (``KeyboardInterrupt``), the whole group gets SIGTERM, then SIGKILL after 1 s, before
          the exception propagates: no child outlives it (a process that moved itself to another
          session with ``setsid`` is out of reach here; it still ends with the kernel).
        - Each stream keeps its first and last 5 MiB; the middle of a bigger output is replaced
          by a line saying how much was left out. To keep everything, redirect to a file:
          ``bash("make > build.log 2>&1")``.
        - A background job (``cmd &``) that keeps the output pipes open does not block the
          return: 0.5 s after the shell exits ``bash`` stops reading, says so in ``.stderr``, and
          leaves the job running (it may then die of SIGPIPE when it writes). Start long-lived
          jobs with their output redirected: ``bash("nohup server > server.log 2>&1 &")``.

    Raises:
        subprocess.TimeoutExpired: ``timeout`` ran out (the process group has been ended).
        KeyboardInterrupt: the cell was interrupted (the process group has been ended).
        FileNotFoundError / NotADirectoryError: ``cwd`` does not exist or is not a directory.
        TypeError / ValueError: ``command`` is not a string, ``timeout`` is not positive.
    """
    if not isinstance(command, str):
        raise TypeError(
            f"bash() takes the command as one string, got {type(command).__name__}; "
            "for a list of arguments use bash(shlex.join(args))"
        )
    if timeout is not None and not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds or None, got {timeout!r}")
    workdir = None
    if cwd is not None:
        workdir = os.path.abspath(os.path.expanduser(os.fspath(cwd)))
        if not os.path.exists(workdir):
            raise FileNotFoundError(f"cwd {workdir} does not exist")
        if not os.path.isdir(workdir):
            raise NotADirectoryError(f"cwd {workdir} is not a directory")

    shell = "/bin/bash" if os.access("/bin/bash", os.X_OK) else "/bin/sh"
    deadline = None if timeout is None else time.monotonic() + timeout
    stdout, stderr = _Capture("stdout"), _Capture("stderr")
    process = subprocess.Popen(
        [shell, "-c", command],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=workdir,
        start_new_session=True,  # its own process group (and session): ended as a whole
    )
    try:
        finished = _pump(process, stdout, stderr, deadline)
    except BaseException:
        _end_group(process)
        raise
    if not finished:
        _end_group(process, stdout, stderr)
        output, errors = stdout.text(), stderr.text()
        raise subprocess.TimeoutExpired(command, timeout, output=output, stderr=errors)
    return _Result(command, process.returncode, stdout.text(), stderr.text())


def _pump(process, stdout, stderr, deadline):
    """Read both pipes until EOF and the shell has exited. False if the deadline came first."""
    selector = selectors.DefaultSelector()
    streams = {process.stdout: stdout, process.stderr: stderr}
    for pipe in streams:
        selector.register(pipe, selectors.EVENT_READ)
    exited_at = None
    try:
        while streams:
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                return False
            if exited_at is None and process.poll() is not None:
                exited_at = now
            if exited_at is not None and now - exited_at >= BACKGROUND_GRACE:
                stderr.add(
                    b"\n[bash(): the command exited but a background process still holds its "
                    b"output open; stopped reading and left it running. Redirect a background "
                    b"job's output (cmd > log 2>&1 &) to avoid this.]\n"
                )
                break
            wait = _POLL if deadline is None else max(0.0, min(_POLL, deadline - now))
            for key, _ in selector.select(wait):
                data = os.read(key.fd, _CHUNK)
                if data:
                    streams[key.fileobj].add(data)
                else:
                    selector.unregister(key.fileobj)
                    del streams[key.fileobj]
    finally:
        selector.close()
    while True:  # both pipes are closed; the shell itself may still be running
        wait = _POLL if deadline is None else max(0.0, min(_POLL, deadline - time.monotonic()))
        try:
            process.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            if deadline is not None and time.monotonic() >= deadline:
                return False
            continue
        _close_pipes(process)
        return True


def _end_group(process, stdout=None, stderr=None):
    """End the command's whole process group: SIGTERM, up to KILL_GRACE, then SIGKILL.

    Whatever the group still prints meanwhile goes into ``stdout``/``stderr`` when given (the
    output of a timed-out command). A second interrupt during the grace goes straight to SIGKILL
    (the ``finally``).
    """
    group = process.pid  # start_new_session: the shell leads a group with its own pid
    try:
        _signal_group(group, signal.SIGTERM)
        _signal_group(group, signal.SIGCONT)  # a stopped process only acts on SIGTERM once resumed
        give_up = time.monotonic() + KILL_GRACE
        while time.monotonic() < give_up:
            if stdout is not None:
                _drain(process, stdout, stderr)
            process.poll()  # reap the shell, or it counts as a member of the group
            if not _group_alive(group):
                break
            time.sleep(0.02)
    finally:
        if _group_alive(group):
            _signal_group(group, signal.SIGKILL)
        try:
            process.wait(timeout=KILL_GRACE)
        except subprocess.TimeoutExpired:
            pass  # unkillable (stuck in the kernel, state D): nothing more can be done from here
        if stdout is not None:
            _drain(process, stdout, stderr)
        _close_pipes(process)


def _drain(process, stdout, stderr):
    """Read whatever is buffered in the pipes now, without blocking."""
    for pipe, capture in ((process.stdout, stdout), (process.stderr, stderr)):
        if pipe is None or pipe.closed:
            continue
        os.set_blocking(pipe.fileno(), False)
        try:
            while True:
                data = os.read(pipe.fileno(), _CHUNK)
                if not data:
                    break
                capture.add(data)
        except BlockingIOError:
            pass  # nothing more buffered right now


def _close_pipes(process):
    for pipe in (process.stdout, process.stderr):
        if pipe is not None and not pipe.closed:
            pipe.close()


def _signal_group(group, signum):
    try:
        os.killpg(group, signum)
    except ProcessLookupError:
        pass  # the group is already gone
    except PermissionError:
        pass  # a member changed user (setuid); the others were still signalled


def _group_alive(group):
    """Whether a process of the group is still running (zombies not yet reaped do not count)."""
    try:
        names = os.listdir("/proc")
    except OSError:
        names = None
    if names is None or "self" not in names:
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                fields = handle.read().rpartition(b")")[2].split()
        except OSError:
            continue  # it exited while we looked
        # After the command name: state, ppid, pgrp, ...
        if len(fields) > 2 and int(fields[2]) == group and fields[0] not in (b"Z", b"X"):
            return True
    return False


class _Capture:
    """One stream's output: the first CAPTURE_HEAD_BYTES and the last CAPTURE_TAIL_BYTES."""

    def __init__(self, name):
        self.name = name
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, data):
        self.total += len(data)
        room = CAPTURE_HEAD_BYTES - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            if len(self.tail) > 2 * CAPTURE_TAIL_BYTES:  # trim in batches: amortised O(1) per byte
                del self.tail[: len(self.tail) - CAPTURE_TAIL_BYTES]

    def text(self):
        if len(self.tail) > CAPTURE_TAIL_BYTES:
            del self.tail[: len(self.tail) - CAPTURE_TAIL_BYTES]
        left_out = self.total - len(self.head) - len(self.tail)
        if left_out <= 0:
            return bytes(self.head + self.tail).decode("utf-8", "replace")
        notice = (
            f"\n[bash(): {left_out:,} bytes of {self.name} left out here ({self.total:,} in all); "
            f"only the first {CAPTURE_HEAD_BYTES // 1048576} MiB and the last "
            f"{CAPTURE_TAIL_BYTES // 1048576} MiB are kept. Redirect to a file to keep "
            f"everything: bash('cmd > out.txt 2>&1').]\n"
        )
        return self.head.decode("utf-8", "replace") + notice + self.tail.decode("utf-8", "replace")


class _Result(subprocess.CompletedProcess):
    """A ``CompletedProcess`` that IPython displays readably (stdout and stderr as text)."""

    def __repr__(self):
        return super().__repr__().replace(type(self).__name__, "CompletedProcess", 1)

    def _repr_pretty_(self, printer, cycle):
        parts = [f"CompletedProcess(args={self.args!r}, returncode={self.returncode})"]
        for name in ("stdout", "stderr"):
            text = getattr(self, name)
            if text:
                parts.append(f"{name}:\n{text.rstrip(chr(10))}")
        printer.text("\n".join(parts))

    def __reduce__(self):
        # Pickles (and snapshots) as a plain CompletedProcess, which any interpreter can revive.
        return (subprocess.CompletedProcess, (self.args, self.returncode, self.stdout, self.stderr))
