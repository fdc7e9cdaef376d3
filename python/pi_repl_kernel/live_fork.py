"""Live fork: a copy-on-write copy of this kernel that becomes a kernel of its own (issue 25).

``spawn_agent(fork=True)`` forks the running kernel, from inside the cell that asked, and the
copy serves the Jupyter protocol on new sockets: a sub-agent starts with every variable of
the parent as it was at that moment, shared with the parent until either writes it, in
milliseconds whatever the namespace's size.

Owns: whether a live fork is possible here (``unavailable_reason``), the new kernel's runtime
directory (``prepare``: a private directory with a connection file of new IPC sockets and a new
key, and a FIFO that is the new kernel's lifeline), the fork itself (``fork_into``), and
everything the copy does to become a kernel (``_become_kernel``). Does not own: admission or
the child's process (the host's ``agents/spawn.rs``), connecting to the copy
(``kernel/live_fork.rs``), or its snapshots (the child host configures a store of its own).

A forked kernel is not a kernel (``docs/traps.md``, trap 15). What the copy does, in order:

1. The first child leaves the kernel's session (``setsid``) and forks again, so the copy is
   nobody's child here (it is reaped by the namespace's init, or the host) and no signal to the
   kernel's group reaches it; the copy then leads a process group of its own (``setpgid``),
   which its host signals.
2. It reports its pid to the parent (a pipe) at once: the parent's cell waits only for that.
3. fds 1 and 2, and ipykernel's saved copies of the original ones, go to a log file in the
   runtime directory: the inherited ones are the parent's output pipes, read by the parent's
   threads, which would forward the copy's output as the parent's. The kernel's lifeline (the
   host's pipe) is closed: the copy's lifeline is the FIFO (below).
4. ``JPY_PARENT_PID`` is dropped and the new app polls no parent (ipykernel's poller would take
   a parent of pid 1 as the host gone), the kernel tag is replaced (processes the copy's cells start are the child host's to
   end, not the parent's), numpy's global generator is reseeded (Python's ``random`` is, by
   CPython, at every fork; numpy's is not, and N copies of one state would draw alike).
5. A new event loop, and a new ``IPKernelApp``, ``IPythonKernel``, ZMQ context and sockets on
   the prepared connection file. IPython's shell is a singleton: the new kernel takes the
   existing one, with its namespace, its execution count and pi-repl's patches; the old
   app's sockets, threads and loop are abandoned, never closed (libzmq does not survive a fork;
   pyzmq skips closing an object of another process), and the old cell's frames stay below on
   the stack, never returned to. The copy ends with ``os._exit``.
6. A thread watches the FIFO: the child host opens it for writing and writes one byte when it
   has connected; when the host's end closes (it exited, even by SIGKILL) the copy removes its
   runtime directory, kills its process group and exits. A copy no host adopted within
   ``ADOPT_LIMIT_S`` does the same.
7. Once adopted, the child's host hands it the variables it would give a kernel it launched
   (``take_environment``: its host id, the tag, the child's settings), in place of the parent's
   where no cell changed them: the copy's environment is the parent's until then.

Invariants: the parent is never affected: its sockets, threads, loop, store and pending save
children are only read by the copy, never written or closed; the parent's cell returns after
one fork and one pipe read.
"""

import asyncio
import json
import os
import secrets
import select
import signal
import sys
import threading
import time

from . import host_requests, launch
from .snapshot import fork as snapshot_fork

ADOPT_LIMIT_S = 60
"""How long a forked kernel waits for a host to adopt it (open its lifeline) before exiting."""

PID_WAIT_S = 10
"""How long the parent's cell waits for the copy to report its pid."""

CONNECTION_NAME = "connection.json"
LIFELINE_NAME = "lifeline"
LOG_NAME = "kernel.log"


class LiveForkError(Exception):
    """The live fork could not be made; the message says why."""


def unavailable_reason():
    """Why this kernel cannot be forked live now, or None.

    Only pi-repl's own local kernel can: a remote kernel's process is on another machine, and
    one started from a kernelspec is not set up by ``launch``. A CUDA context does not survive a
    fork. The user's ``PI_REPL_SNAPSHOT_FORK=0`` (no fork of this kernel) holds for live forks
    too. Threads a cell started do not survive either (the copy has only the forking thread):
    that is not a reason to refuse, but the child is told which were left behind
    (``threads_left``).
    """
    if launch.started_by is None:
        return "this kernel was not started by pi-repl's launcher (a remote or kernelspec kernel)"
    from . import snapshot

    store = snapshot._store
    if store is not None and not store.fork_allowed:
        return f"{snapshot_fork.FORK_ENV}=0: this kernel is not forked"
    return snapshot_fork.fork_unsafe_reason()


def memory_shortfall():
    """Why a live copy would not fit in memory now, or None: as for a save child, the rule is
    ``MemAvailable`` at least this kernel's resident size, what copy-on-write needs if the copy
    (or the parent, while the copy lives) rewrote every page. Where the figures cannot be read,
    the fork goes ahead."""
    available = snapshot_fork._proc_kib("/proc/meminfo", "MemAvailable:")
    resident = snapshot_fork._proc_kib("/proc/self/status", "VmRSS:")
    if available is None or resident is None or available >= resident:
        return None
    return (f"only {snapshot_fork._mib(available)} of memory is free, less than this "
            f"workspace's {snapshot_fork._mib(resident)} that a live copy may need once either "
            "side has changed its data")


_KERNEL_THREADS = ("MainThread", "IOPub", "Heartbeat", "Control", "Shell channel")
_KERNEL_THREAD_MARKS = ("pi-repl-", "(_watch_pipe_fd)", "IPythonHistorySavingThread")


def threads_left():
    """Names of the threads a cell started, which a forked copy will not have."""
    return [thread.name for thread in threading.enumerate()
            if thread.name not in _KERNEL_THREADS
            and not any(mark in thread.name for mark in _KERNEL_THREAD_MARKS)]


class Prepared:
    """The runtime directory of the kernel a fork becomes."""

    def __init__(self, directory):
        self.directory = directory
        self.connection_file = os.path.join(directory, CONNECTION_NAME)
        self.lifeline = os.path.join(directory, LIFELINE_NAME)
        self.log = os.path.join(directory, LOG_NAME)
        self.tag = secrets.token_hex(8)


def prepare():
    """A new private runtime directory in the temp directory: a connection file (IPC sockets in
    the directory, a new key) and the lifeline FIFO."""
    import tempfile

    # Where the host makes its kernels' runtime directories (its temp directory, which the
    # kernel's environment names too): short enough for IPC socket paths.
    directory = tempfile.mkdtemp(prefix="pi-repl-fork-")
    os.chmod(directory, 0o700)
    prepared = Prepared(directory)
    connection = {
        "transport": "ipc",
        "ip": os.path.join(directory, "kernel"),
        "shell_port": 1,
        "iopub_port": 2,
        "stdin_port": 3,
        "control_port": 4,
        "hb_port": 5,
        "key": secrets.token_hex(32),
        "signature_scheme": "hmac-sha256",
        "kernel_name": "",
    }
    descriptor = os.open(prepared.connection_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as file:
        json.dump(connection, file)
    os.mkfifo(prepared.lifeline, 0o600)
    return prepared


def discard(prepared, pid=None):
    """Kill a copy no host will adopt (``pid``) and remove its runtime directory."""
    if pid is not None:
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
    import shutil

    shutil.rmtree(prepared.directory, ignore_errors=True)


def fork_into(prepared):
    """Fork this kernel; the copy becomes a kernel serving ``prepared``. Returns the copy's pid
    (as this kernel sees it). Raises ``LiveForkError`` when the fork or the copy failed."""
    read_end, write_end = os.pipe()
    try:
        first = os.fork()
    except OSError as error:
        os.close(read_end)
        os.close(write_end)
        raise LiveForkError(f"fork() failed: {error}") from None
    if first == 0:
        status = 1
        try:
            os.close(read_end)
            os.setsid()
            if os.fork() != 0:
                status = 0
            else:
                _become_kernel(prepared, write_end)
        except BaseException:  # noqa: BLE001 - one thread, no kernel: report and leave
            pass
        os._exit(status)
    os.close(write_end)
    try:
        os.waitpid(first, 0)
        line = _read_line(read_end, PID_WAIT_S)
    finally:
        os.close(read_end)
    if not line.isdigit():
        raise LiveForkError(
            "the forked copy of this kernel ended before it reported its pid"
            if not line else f"the forked copy of this kernel failed: {line}")
    return int(line)


def _read_line(descriptor, limit_s):
    """The first line written to ``descriptor`` (until EOF), waiting at most ``limit_s``."""
    deadline = time.monotonic() + limit_s
    data = b""
    while b"\n" not in data:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        ready, _, _ = select.select([descriptor], [], [], left)
        if not ready:
            break
        chunk = os.read(descriptor, 4096)
        if not chunk:
            break
        data += chunk
    return data.split(b"\n", 1)[0].decode(errors="replace").strip()


def _become_kernel(prepared, report):
    """Everything the copy does (the module docstring's steps 1 to 6); never returns."""
    os.setpgid(0, 0)
    os.write(report, f"{os.getpid()}\n".encode())
    os.close(report)
    _leave_the_parents_output(prepared.log)
    launch.close_lifeline()
    # The one lock of the stdin channel may be held by a parent's thread (an llm_query in the
    # background): that thread is not here to release it.
    host_requests.reset_lock()
    os.environ.pop("JPY_PARENT_PID", None)
    os.environ[launch.TAG_VAR] = prepared.tag
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        try:
            numpy.random.seed()
        except Exception:  # noqa: BLE001 - a broken numpy keeps its state
            pass
    threading.Thread(target=_watch_lifeline, args=(prepared.lifeline,),
                     name="pi-repl-lifeline", daemon=True).start()
    try:
        _serve(prepared.connection_file)
    finally:
        sys.stderr.flush()
        os._exit(0)


def _leave_the_parents_output(log_path):
    """Point fds 1 and 2 (and ipykernel's copies of the original ones) at the log file."""
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    for stream in (sys.stdout, sys.stderr):
        original = getattr(stream, "_original_stdstream_copy", None)
        if isinstance(original, int) and original > 2:
            os.dup2(log, original)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    text = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115 - lives as long as the process
    sys.stdout = sys.__stdout__ = text
    sys.stderr = sys.__stderr__ = text


def _serve(connection_file):
    """A new kernel app on ``connection_file`` around the existing shell, run until it exits."""
    from ipykernel.ipkernel import IPythonKernel
    from ipykernel.kernelapp import IPKernelApp

    old_app = IPKernelApp.instance()
    shell = old_app.shell
    IPKernelApp.clear_instance()
    IPythonKernel.clear_instance()
    asyncio.set_event_loop(asyncio.new_event_loop())
    launch.iopub_pipe_over_ipc(connection_file)
    app = IPKernelApp.instance()
    # Not ``hide_initial_ns``: it would hide every name the namespace holds now (the user's
    # data) from ``%who`` and from the snapshot store, which saves no hidden name. No parent
    # poller: its default was read from ``JPY_PARENT_PID`` when ipykernel was imported, and
    # an orphan's parent is pid 1, which it takes as the host gone (the FIFO is the lifeline).
    app.initialize(["-f", connection_file, *launch.APP_ARGS,
                    "--InteractiveShellApp.hide_initial_ns=False",
                    "--IPKernelApp.parent_handle=0"])
    kernel = app.kernel
    if kernel.shell is not shell:
        raise LiveForkError("the new kernel did not take the existing shell")
    shell.kernel = kernel
    shell.parent = kernel
    _leave_the_parents_cell(shell)
    launch.report_crashes_to_host()
    app.start()


def _leave_the_parents_cell(shell):
    """The copy was made inside a cell, and never leaves it: the shell's context managers
    entered for that cell stay entered. Reset their nesting, so the copy's cells enter them
    afresh (the display trap sets ``sys.displayhook`` to the shell's, which sends a cell's
    value; left nested, the app's hook would send it without the cell's header)."""
    for trap in (shell.display_trap, shell.builtin_trap):
        if getattr(trap, "_nested_level", 0) > 0:
            trap._nested_level = 0


def take_environment(variables):
    """The adopting host's call: take ``variables`` (what it would give a kernel it launched)
    in place of the parent's, for every variable a cell has not changed since the parent's
    launch (a three-way merge: a variable a cell set, changed or removed stays as the cell left
    it). Returns the names changed."""
    base = launch.initial_environment or {}
    changed = []
    for name in sorted(set(base) | set(variables)):
        if os.environ.get(name) != base.get(name):
            continue  # a cell changed it: the workspace's own
        wanted = variables.get(name)
        if wanted == os.environ.get(name):
            continue
        if wanted is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = wanted
        changed.append(name)
    launch.initial_environment = dict(variables)
    return {"changed": changed}


def _watch_lifeline(path):
    """Exit when the adopting host's end of the FIFO closes, or when none opens it in time."""
    directory = os.path.dirname(path)
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        _end(directory)
    poller = select.poll()
    poller.register(descriptor, select.POLLIN | select.POLLHUP)
    # Linux reports no hang-up on a FIFO no writer has opened yet: until the host writes its
    # byte, poll waits (for at most the adoption limit).
    if not poller.poll(ADOPT_LIMIT_S * 1000):
        _end(directory)
    while True:
        try:
            data = os.read(descriptor, 64)
        except BlockingIOError:
            data = b"."
        except OSError:
            data = b""
        if not data:
            _end(directory)  # EOF: every writer is gone, the host with them
        try:
            poller.poll()
        except InterruptedError:
            pass


def _end(directory):
    """The host is gone (or never came): remove the runtime directory (a host that adopted it
    would have, had it not been killed), end this kernel's process group and exit."""
    import shutil

    try:
        shutil.rmtree(directory, ignore_errors=True)
        os.killpg(os.getpgrp(), signal.SIGKILL)
    finally:
        os._exit(launch.EXIT_HOST_GONE)
