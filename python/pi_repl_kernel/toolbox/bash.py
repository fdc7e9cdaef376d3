"""pi-repl default helper: ``bash``.

A helper file like any user's (see docs/helpers.md); it shares nothing with the other toolbox
files but the result types (``pi_repl_kernel.toolbox_support``).

Invariant: every command runs in a process group of its own, and that group ends

- with the cell: if ``bash`` does not return normally (``KeyboardInterrupt`` from an aborted
  cell, any other exception) and on timeout, the whole group is ended (SIGTERM, ``KILL_GRACE``
  seconds, SIGKILL) before ``bash`` returns or the exception leaves it;
- with the kernel (and so with the host, whose exit ends the kernel through its lifeline): each
  group is registered with a small *reaper* process (one per kernel, started on first use, in a
  session of its own so that signals to the kernel's process group do not reach it). The reaper
  holds the read end of a pipe only the kernel writes to; when the kernel dies, however it dies
  (even SIGKILL), the pipe reports end-of-file and the reaper ends every registered group that
  still has a process: background jobs a command left running included.

The host's SIGINT reaches only the kernel's own process group, so without this a command's
children would outlive the cell.
"""

import codecs
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import threading
import time

from pi_repl_kernel import toolbox_support as _io

helper_description = (
    "Run a shell command; output streams to the cell; returns .output (interleaved, tail-capped), "
    ".stdout, .stderr, .returncode, even when it fails or times out."
)

MAX_OUTPUT_BYTES = 50 * 1024
MAX_OUTPUT_LINES = 2000
"""The interleaved record ``bash`` returns (``.output``) keeps the last 50 KiB / 2000 lines
(like pi's bash); the full output is then written to a file named in the result."""

ECHO_BYTES = 20 * 1024
"""Output printed to the cell as it arrives, at most; past it the cell is told where the rest
is (the result shows the tail, the file everything)."""

STREAM_KEEP_BYTES = 8 * 1024 * 1024
"""``.stdout`` and ``.stderr`` each keep up to their last 8 MiB (for code to parse)."""

KILL_GRACE = 1.0
"""Seconds between SIGTERM and SIGKILL when a command's process group is ended."""

BACKGROUND_GRACE = 0.5
"""Seconds ``bash`` keeps reading after the shell exits while a background process still holds
its output pipes open; then it returns, leaving that process running (until the kernel ends)."""

_CHUNK = 64 * 1024
_POLL = 0.1  # how often the loop checks the shell's exit while pipes are still open


def bash(command, timeout=None, cwd=None, echo=True):
    """Run ``command`` with ``/bin/bash -c`` (``/bin/sh`` if there is no bash); return its result.

    Arguments:
        command: one string of shell code (pipes, ``&&``, redirections, globs all work). To
            pass a list of arguments safely, quote it: ``bash(shlex.join(["grep", "-n", p, f]))``.
        timeout: seconds; when they run out, the command and everything it started are ended
            and the result is returned with what ran and a note (``.timed_out`` is True): no
            exception. ``None`` waits however long it takes.
        cwd: the directory to run in (default: the kernel's current directory).
        echo: print the output to the cell as it arrives (stdout and stderr interleaved, the
            first ``ECHO_BYTES``), so a long build shows progress. ``False`` for output you only
            process in code.

    Returns a ``subprocess.CompletedProcess`` with more fields:

    - ``.output``: stdout and stderr interleaved as they arrived (a ``str``), its last 50 KiB /
      2000 lines, after a line saying what was left out and where the whole is;
    - ``.full_output``: path of a file with the whole interleaved output when ``.output`` was
      cut (else None);
    - ``.stdout``, ``.stderr``: each stream apart (up to its last 8 MiB), for code;
    - ``.returncode`` (negative: killed by that signal), ``.timed_out``, ``.args``.

    A non-zero exit status does **not** raise; check it (``.check_returncode()`` raises
    ``CalledProcessError``). Displayed as a cell's result, it shows the output not already
    echoed and the exit status::

        bash("make test")                          # streams, then "[exit status 2]"
        r = bash("git status --porcelain", echo=False)
        changed = r.stdout.splitlines()

    Behaviour:
        - stdin is ``/dev/null``; the shell is not a login shell (no ``~/.bashrc`` aliases).
        - The command runs in its own process group. On timeout, or when the cell is interrupted
          (``KeyboardInterrupt``), the whole group gets SIGTERM, then SIGKILL after 1 s; when the
          kernel dies (or the host, which ends the kernel), a reaper process ends it. A process
          that moved itself to another process group (``setsid``, ``nohup setsid ...``) is out
          of reach, which is the way to start a server that outlives the kernel.
        - A background job (``cmd &``) that keeps the output pipes open does not block the
          return: 0.5 s after the shell exits ``bash`` stops reading, says so, and leaves the job
          running until the kernel ends. Redirect its output: ``bash("server > log 2>&1 &")``.
        - The order of stdout and stderr in ``.output`` is the order their chunks arrived in,
          as a terminal would show them (two pipes: lines written within microseconds of each
          other may swap).

    Raises:
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
        workdir = _io.resolve(cwd)
        if not os.path.exists(workdir):
            raise FileNotFoundError(f"cwd {workdir} does not exist")
        if not os.path.isdir(workdir):
            raise NotADirectoryError(f"cwd {workdir} is not a directory")

    shell = "/bin/bash" if os.access("/bin/bash", os.X_OK) else "/bin/sh"
    deadline = None if timeout is None else time.monotonic() + timeout
    record = _Record(echo)
    stdout, stderr = _Stream(record, "stdout"), _Stream(record, "stderr")
    process, held_interrupt = _spawn(
        [shell, "-c", command],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=workdir,
        **_OWN_GROUP,  # a process group of its own, in the kernel's session: ended as a whole
    )
    try:
        if held_interrupt is not None:
            _deliver(held_interrupt)  # the cell was interrupted while the command started
        _REAPER.register(process.pid)
        finished = _pump(process, stdout, stderr, deadline)
    except BaseException:
        _end_group(process)
        record.close()
        raise
    timed_out = not finished
    if timed_out:
        _end_group(process, stdout, stderr)
        record.note(
            f"[bash(): timed out after {timeout:g} s; the command and its process group were "
            f"ended (SIGTERM, then SIGKILL after {KILL_GRACE:g} s). The output above is what ran."
            f"]\n"
        )
    return record.result(command, process.returncode, stdout.text(), stderr.text(), timed_out)


# The kernel needs Python 3.11 or newer (IPython 9), which has `process_group`.
_OWN_GROUP = {"process_group": 0}


def _spawn(argv, **options):
    """``subprocess.Popen(argv, **options)`` with SIGINT held off until it has returned, so an
    interrupt cannot land after the child exists but before its pid is known (it would leave
    the command running). Returns ``(process, the SIGINT handler to call now, or None)``."""
    if threading.current_thread() is not threading.main_thread():
        return subprocess.Popen(argv, **options), None  # signals only reach the main thread
    caught = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        process = subprocess.Popen(argv, **options)
    finally:
        signal.signal(signal.SIGINT, previous)
    return process, (previous if caught else None)


def _deliver(handler):
    """Act on a SIGINT that arrived during ``_spawn`` as its handler would have."""
    if callable(handler):
        handler(signal.SIGINT, None)
    elif handler != signal.SIG_IGN:
        raise KeyboardInterrupt


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
                    b"output open; stopped reading and left it running (until the kernel ends). "
                    b"Redirect a background job's output (cmd > log 2>&1 &) to avoid this.]\n"
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
    group = process.pid  # process_group=0: the shell leads a group with its own pid
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
        # A SIGKILL is acted on when its target next runs, which on a busy machine is after
        # kill() returned: the group has ended only once none of it runs (bounded).
        give_up = time.monotonic() + KILL_GRACE
        while _group_alive(group) and time.monotonic() < give_up:
            time.sleep(0.01)
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


class _Stream:
    """One stream's output, kept apart (its last ``STREAM_KEEP_BYTES``) and also fed, chunk by
    chunk, into the interleaved record."""

    def __init__(self, record, name):
        self.record, self.name = record, name
        self.kept = bytearray()
        self.total = 0

    def add(self, data):
        self.total += len(data)
        self.kept += data
        if len(self.kept) > 2 * STREAM_KEEP_BYTES:  # trim in batches: amortised O(1) per byte
            del self.kept[: len(self.kept) - STREAM_KEEP_BYTES]
        self.record.add(data)

    def text(self):
        if len(self.kept) > STREAM_KEEP_BYTES:
            del self.kept[: len(self.kept) - STREAM_KEEP_BYTES]
        text = self.kept.decode("utf-8", "replace")
        left_out = self.total - len(self.kept)
        if left_out > 0:
            where = f" (all of it, interleaved: {self.record.path})" if self.record.path else ""
            text = f"[bash(): the first {left_out:,} bytes of {self.name} left out{where}]\n" + text
        return text


class _Record:
    """The interleaved output: echoed to the cell as it arrives (up to ``ECHO_BYTES``), kept in
    memory while small, and written to a file once it outgrows ``MAX_OUTPUT_BYTES`` (the file
    then has all of it; memory keeps a tail)."""

    def __init__(self, echo):
        self.echo = echo
        self.echoed = 0
        self.echo_done = not echo
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self.tail = bytearray()
        self.total = 0
        self.path = None
        self.file = None

    def add(self, data):
        self.total += len(data)
        self.tail += data
        if self.file is None and len(self.tail) > MAX_OUTPUT_BYTES:
            descriptor, self.path = tempfile.mkstemp(prefix="pi-repl-bash-", suffix=".log")
            self.file = os.fdopen(descriptor, "wb")
            self.file.write(self.tail)
        elif self.file is not None:
            self.file.write(data)
        if len(self.tail) > 4 * MAX_OUTPUT_BYTES:
            del self.tail[: len(self.tail) - 2 * MAX_OUTPUT_BYTES]
        self._echo(data)

    def note(self, text):
        self.add(text.encode("utf-8"))

    def _echo(self, data):
        if self.echo_done:
            return
        room = ECHO_BYTES - self.echoed
        part = data[:room]
        self.echoed += len(part)
        text = self.decoder.decode(part)
        if len(data) > room:
            self.echo_done = True
            text += self.decoder.decode(b"", final=True)
            text += (
                f"\n[bash(): echo stops after {ECHO_BYTES // 1024} KiB; the command goes on, and "
                f"its result shows the tail of the output]\n"
            )
        if text:
            sys.stdout.write(text)
            sys.stdout.flush()

    def close(self):
        if self.file is not None:
            self.file.close()
            self.file = None

    def result(self, command, returncode, stdout, stderr, timed_out):
        self.close()
        text = self.tail.decode("utf-8", "replace")
        lines = text.splitlines(keepends=True)
        cut = len(self.tail) < self.total
        if len(lines) > MAX_OUTPUT_LINES:
            lines, cut = lines[-MAX_OUTPUT_LINES:], True
        text = "".join(lines)
        if len(text.encode("utf-8")) > MAX_OUTPUT_BYTES:
            text = text.encode("utf-8")[-MAX_OUTPUT_BYTES:].decode("utf-8", "ignore")
            text = text.partition("\n")[2] if "\n" in text else text  # start at a whole line
            cut = True
        if cut:
            shown = len(text.encode("utf-8"))
            text = (
                f"[bash(): output was {self.total:,} bytes; showing its last {shown:,} bytes "
                f"({text.count(chr(10)):,} lines). Full output: {self.path}]\n" + text
            )
        result = _Result(command, returncode, stdout, stderr)
        result.output = text
        result.full_output = self.path if cut else None
        result.timed_out = timed_out
        result.echoed = self.echoed if self.echo else 0
        result.echo_complete = self.echo and self.echoed >= self.total
        return result


class _Result(subprocess.CompletedProcess):
    """A ``CompletedProcess`` with the interleaved ``.output``, that IPython displays readably:
    the output not already echoed to the cell, then the exit status."""

    output = ""
    full_output = None
    timed_out = False
    echoed = 0
    echo_complete = False

    def __repr__(self):
        return super().__repr__().replace(type(self).__name__, "CompletedProcess", 1)

    def _repr_pretty_(self, printer, cycle):
        parts = []
        if not self.echo_complete and self.output:
            if self.echoed:
                parts.append("[bash(): the end of the output, after what was echoed above:]")
            parts.append(self.output.rstrip("\n"))
        status = f"exit status {self.returncode}"
        if self.timed_out:
            status += ", timed out"
        if self.full_output:
            status += f"; full output: {self.full_output}"
        parts.append(f"[{status}]")
        printer.text("\n".join(parts))

    def __reduce__(self):
        # Pickles (and snapshots) as a plain CompletedProcess, which any interpreter can revive,
        # with .output, .full_output and .timed_out kept as instance attributes.
        extra = {"output": self.output, "full_output": self.full_output, "timed_out": self.timed_out}
        args = (self.args, self.returncode, self.stdout, self.stderr)
        return (subprocess.CompletedProcess, args, extra)


_REAPER_CODE = r"""
import os, select, signal, sys, time
signal.signal(signal.SIGINT, signal.SIG_IGN)
groups, pending = set(), b""
def alive(group):
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True
while True:
    ready, _, _ = select.select([0], [], [], 2.0)
    if ready:
        data = os.read(0, 4096)
        if not data:
            break
        *lines, pending = (pending + data).split(b"\n")
        groups.update(int(line) for line in lines if line.strip())
    groups = {group for group in groups if alive(group)}
for sig in (signal.SIGTERM, signal.SIGCONT):
    for group in groups:
        try:
            os.killpg(group, sig)
        except OSError:
            pass
give_up = time.monotonic() + float(sys.argv[1])
while groups and time.monotonic() < give_up:
    time.sleep(0.05)
    groups = {group for group in groups if alive(group)}
for group in groups:
    try:
        os.killpg(group, signal.SIGKILL)
    except OSError:
        pass
"""


class _Reaper:
    """The kernel's reaper process (see the module docstring): started on first use, restarted
    if it is gone; ``register`` tells it a new command's process group."""

    def __init__(self):
        self.process = None
        self.lock = threading.Lock()

    def register(self, group):
        with self.lock:
            for _ in range(2):
                if self.process is None or self.process.poll() is not None:
                    self.process = self._start()
                try:
                    self.process.stdin.write(f"{group}\n".encode())
                    self.process.stdin.flush()
                    return
                except (BrokenPipeError, ValueError):
                    self.process = None

    def _start(self):
        return subprocess.Popen(
            [sys.executable, "-c", _REAPER_CODE, str(KILL_GRACE)],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # out of the kernel's process group: it outlives the kernel
        )


_REAPER = _Reaper()
