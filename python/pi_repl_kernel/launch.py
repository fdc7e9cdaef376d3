"""Boot an ipykernel configured for pi-repl.

The host runs ``python -c <bootstrap> -f <connection file>`` with:

- fd 0: the *lifeline*, a pipe whose write end only the host holds. When the host exits for any
  reason (even SIGKILL) the pipe reads EOF and this process ends its whole process group at once.
  The pipe is moved off fd 0 first, so cells and their subprocesses read ``/dev/null``.
- its own process group (the host interrupts and kills the group, never a lone pid).
- ``PI_REPL_KERNEL_TAG`` in its environment, inherited by everything it starts: when the lifeline
  ends, the processes carrying it are killed too (a ``bash()`` command runs in a session of its
  own, out of the group's reach); while the host lives, it ends them when the kernel exits.

What this module changes in ipykernel, and why:

- ``input()``/``getpass()`` raise a clear ``StdinNotImplementedError`` instead of waiting for a
  person who is not there; when the debugger asked (``%debug``, ``%pdb``, ``breakpoint()``), the
  message says so and points at the traceback instead.
- a ``UsageError`` (``%nonexistent_magic``) is reported as the cell's error, like any other
  exception, instead of a line printed on stderr next to an error with no traceback (which a
  front door would then say twice).
- stream output is flushed in chunks of at most ``CHUNK_CHARS`` characters, so no single IOPub
  message is large however much a cell prints: the host's memory stays bounded and ipykernel's
  high-water mark is never hit by one giant message.
- text that UTF-8 cannot encode (a lone surrogate, ``print('a\\ud800b')``) raises
  ``UnicodeEncodeError`` in the cell at the ``print``/``write``, as a UTF-8 terminal does;
  ipykernel would accept it and then fail to send it, printing its own traceback into the cell's
  stderr (issue 22).
- a cell's file name is a fast hash of its code, not ipykernel's murmur2 in pure Python, which
  took about half a second per MiB of code (a 60 MiB cell spent 30 s there; issue 22). The name
  only served ipykernel's debugger, which pi-repl does not load.
- the history database is off (no sqlite file), and the in-memory history that user cells store
  (``_``, ``Out``, ``In``) is trimmed after every cell (``cell_history``); tracebacks are plain
  text, and ``debugpy`` is not imported (it costs start-up time and prints a warning into the
  first cell).
- a thread's output is labelled with the cell that started it (``thread_output``).
- the host's ``CAPTURE_KEY`` user expression (a durable session's snapshot capture) is evaluated
  after every cell that asks for it, failed or interrupted cells included, before the reply is
  sent (ipykernel evaluates user expressions only after a cell that succeeded): the state an
  answer reports is forked before the answer leaves (``snapshot.capture``).
- a fatal signal (segfault, abort) writes the Python stack to the host's stderr pipe
  (``faulthandler``), so the host can say where the kernel died.
- the IOPub pipe that forked children (``multiprocessing`` with fork) print through is an IPC
  socket in the kernel's private runtime directory, not ipykernel's loopback TCP port: nothing
  outside this user's 0700 directory can reach the kernel (a local process could otherwise put
  text into a cell's output, or wedge the kernel with a large message).

- ``PATH`` starts with this interpreter's ``bin`` and ``VIRTUAL_ENV`` names its venv
  (``environment``): ``python``/``pip`` in a cell's shell are the kernel's; ``%pip install``
  installs with uv when it can (``packages``).

- with ``PI_REPL_ISOLATE=1`` (the host's default for a local kernel) the kernel runs in its own
  user, PID and mount namespace, where a cell sees only the kernel's processes (``namespace``).

If ipykernel itself cannot be imported the process exits with ``EXIT_MISSING_KERNEL`` and names
the missing module on stderr; the host turns that into an actionable error.
"""

import os
import signal
import sys
import threading

from pi_repl_kernel import environment, namespace

EXIT_MISSING_KERNEL = 87
"""Exit status meaning: this interpreter cannot import ipykernel (or one of its dependencies)."""

EXIT_HOST_GONE = 70
"""Exit status used when the lifeline pipe reports that the host has exited."""

CHUNK_CHARS = 256 * 1024
"""Largest amount of text one stream message carries; bigger writes are split and flushed."""

INPUT_UNAVAILABLE = (
    "input() is not available in pi-repl: a cell cannot wait for someone to type. "
    "Put the value in the code instead (for example `answer = 'yes'`)."
)


TAG_VAR = "PI_REPL_KERNEL_TAG"
"""Set by the host in the kernel's environment; every process the kernel starts inherits it."""


def _watch_lifeline(fd):
    """Block until the host's end of the lifeline closes, then end this process group and every
    process carrying this kernel's tag (those in a session of their own).

    The group goes first, at once: the scan of ``/proc`` for tagged processes takes a while, and
    the kernel must not carry on meanwhile (a revive would finish and look like it never was
    cut short). The scan runs in a separate interpreter started in a session of its own, which
    the group kill does not reach (``posix_spawn``: no fork of this process, so no wait for
    locks its other threads hold); only if that cannot start does the scan run here first.
    """
    try:
        while os.read(fd, 4096):
            pass
    except OSError:
        pass
    if namespace.isolated():
        # pid 2 of its own namespace: when it exits, init does, and the namespace's every
        # process is killed with it.
        os._exit(EXIT_HOST_GONE)
    tag = os.environ.get(TAG_VAR)
    swept_elsewhere = False
    if tag:
        try:
            env = {name: value for name, value in os.environ.items() if name != TAG_VAR}
            os.posix_spawn(sys.executable, [sys.executable, "-c", _SWEEPER, TAG_VAR, tag], env,
                           setsid=True)
            swept_elsewhere = True
        except (OSError, TypeError, ValueError):
            pass
    try:
        if not swept_elsewhere:
            _kill_tagged(tag)
    finally:
        try:
            if os.getpgrp() == os.getpid():
                os.killpg(os.getpid(), signal.SIGKILL)
        finally:
            os._exit(EXIT_HOST_GONE)


_SWEEPER = """
import os, signal, sys
wanted = (sys.argv[1] + "=" + sys.argv[2]).encode()
for name in os.listdir("/proc"):
    if name.isdigit() and int(name) != os.getpid():
        try:
            with open("/proc/" + name + "/environ", "rb") as handle:
                if wanted in handle.read().split(b"\\0"):
                    with open("/proc/" + name + "/comm", "rb") as comm:
                        if comm.read().strip() != b"pi-repl-save":
                            os.kill(int(name), signal.SIGKILL)
        except OSError:
            pass
"""
"""What the separate sweeper runs: ``_kill_tagged`` with no import of this package."""


def _kill_tagged(tag):
    """SIGKILL every other process whose environment holds ``TAG_VAR=tag`` (Linux ``/proc``),
    except a save child (``snapshot_fork.CHILD_NAME``): it finishes the answered cells' save."""
    if not tag:
        return
    wanted = f"{TAG_VAR}={tag}".encode()
    me = os.getpid()
    try:
        names = os.listdir("/proc")
    except OSError:
        return
    for name in names:
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as handle:
                if wanted in handle.read().split(b"\0") and not _saving(name):
                    os.kill(int(name), signal.SIGKILL)
        except OSError:
            continue  # gone, or not ours to read


def _saving(pid):
    """True when process ``pid`` is a save child (named ``pi-repl-save``)."""
    try:
        with open(f"/proc/{pid}/comm", "rb") as handle:
            return handle.read().strip() == b"pi-repl-save"
    except OSError:
        return False


started_by = None
"""The connection file this kernel was started with by ``main`` (None in any other kernel: a
remote one, or one a kernelspec started): ``live_fork`` makes its copies' beside it."""

_lifeline_fd = None

initial_environment = None
"""``os.environ`` as the host's launch left it (before any cell): what a cell changed since is
the workspace's, which a live fork keeps (``live_fork.take_environment``)."""


def close_lifeline():
    """Close this process's copy of the host's lifeline (a forked copy of the kernel, which
    has a lifeline of its own, ``live_fork``)."""
    global _lifeline_fd
    if _lifeline_fd is not None:
        try:
            os.close(_lifeline_fd)
        except OSError:
            pass
        _lifeline_fd = None


def _take_lifeline():
    """Move the lifeline pipe off fd 0, put /dev/null there, and watch the pipe on a thread."""
    global _lifeline_fd
    try:
        lifeline = os.dup(0)
    except OSError:
        return  # started without a stdin (by hand, for debugging): nothing to watch
    os.set_inheritable(lifeline, False)
    _lifeline_fd = lifeline
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    watcher = threading.Thread(
        target=_watch_lifeline, args=(lifeline,), name="pi-repl-lifeline", daemon=True
    )
    watcher.start()


DEBUGGER_UNAVAILABLE = (
    "the debugger (%debug, %pdb, pdb or breakpoint()) needs interactive input, which pi-repl "
    "does not offer: a cell cannot wait for someone to type. Read the traceback instead, or "
    "inspect the failing values directly (for example print them, or use "
    "`sys.last_value.__traceback__` and `traceback.walk_tb`)."
)

_DEBUGGER_MODULES = ("pdb", "bdb", "IPython.core.debugger", "ipdb")


def _asked_by_debugger():
    """True when a debugger (pdb, IPython's, ipdb) is on the stack that asks for input."""
    frame = sys._getframe(1)
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if module in _DEBUGGER_MODULES or module.startswith("ipdb."):
            return True
        frame = frame.f_back
    return False


def _refuse_input(kernel_class, error_class):
    """Make input() and getpass() fail at once with an explanation."""

    class DebuggerUnavailable(error_class):
        """The debugger's refusal, shown as its one line: the frames of pdb's command loop that
        led to the prompt say nothing to the reader (the debugger already printed where it
        stopped)."""

        def _render_traceback_(self):
            return [f"{error_class.__name__}: {self}"]

    DebuggerUnavailable.__name__ = DebuggerUnavailable.__qualname__ = error_class.__name__

    def raw_input(self, prompt=""):
        if _asked_by_debugger():
            raise DebuggerUnavailable(DEBUGGER_UNAVAILABLE)
        raise error_class(INPUT_UNAVAILABLE)

    def refuse_breakpoint(*args, **kwargs):
        # At once, rather than pdb stopping in whatever frame runs next and then asking.
        raise DebuggerUnavailable(DEBUGGER_UNAVAILABLE)

    sys.breakpointhook = refuse_breakpoint

    def getpass(self, prompt="", stream=None, **kwargs):
        raise error_class(INPUT_UNAVAILABLE.replace("input()", "getpass()"))

    kernel_class.raw_input = raw_input
    kernel_class.getpass = getpass


def _bound_stream_messages(outstream_class):
    """Flush an OutStream every CHUNK_CHARS characters so each IOPub message stays small."""
    original_write = outstream_class.write
    outstream_class._pi_repl_pending = 0

    def flush_if_due(stream, pending):
        if pending < CHUNK_CHARS:
            stream._pi_repl_pending = pending
            return
        pub = getattr(getattr(stream, "pub_thread", None), "thread", None)
        if pub is None or pub.ident != threading.get_ident():
            stream.flush()  # waits until the pub thread has sent it: natural back-pressure
            pending = 0
        stream._pi_repl_pending = pending

    def write(self, string):
        if not isinstance(string, str):
            return original_write(self, string)  # raises ipykernel's own TypeError
        if not string.isascii():
            # What cannot be sent fails here, in the cell, as on a UTF-8 terminal.
            string.encode("utf-8")
        total = len(string)
        if total <= CHUNK_CHARS:
            original_write(self, string)
            pending = self._pi_repl_pending + total
            if pending < CHUNK_CHARS:
                self._pi_repl_pending = pending
            else:
                flush_if_due(self, pending)
            return total
        for start in range(0, total, CHUNK_CHARS):
            piece = string[start : start + CHUNK_CHARS]
            original_write(self, piece)
            flush_if_due(self, self._pi_repl_pending + len(piece))
        return total

    outstream_class.write = write
    return write


def _stream_errors_end_at_the_cell(shell_class, write):
    """A traceback raised in the stream's ``write`` (text UTF-8 cannot encode) ends at the
    user's line, as on a terminal whose ``write`` is C: ``write``'s own frame is cut off."""
    original = shell_class.showtraceback

    def showtraceback(self, exc_tuple=None, *args, **kwargs):
        value = exc_tuple[1] if exc_tuple else sys.exc_info()[1]
        tb = getattr(value, "__traceback__", None)
        while tb is not None and tb.tb_next is not None:
            if tb.tb_next.tb_frame.f_code is write.__code__:
                tb.tb_next = None  # the same chain sys.exc_info() and sys.last_traceback hold
                break
            tb = tb.tb_next
        return original(self, exc_tuple, *args, **kwargs)

    shell_class.showtraceback = showtraceback


def _fast_cell_names():
    """Name each cell's code by a fast hash (blake2b) in ipykernel's temporary directory.

    ipykernel names it by murmur2 computed in pure Python, one character at a time; the name
    only matters to its debugger (which pi-repl does not load), and IPython maps any name back
    to ``Cell In[N]``. An ipykernel without that compiler is left as it is.
    """
    import hashlib

    try:
        from ipykernel.compiler import XCachingCompiler, get_tmp_directory
    except ImportError:
        return

    def get_code_name(self, raw_code, code, number):
        cell_name = os.environ.get("IPYKERNEL_CELL_NAME")
        if cell_name is not None:
            return cell_name
        digest = hashlib.blake2b(raw_code.encode("utf-8", "surrogatepass"), digest_size=8)
        return os.path.join(get_tmp_directory(), f"{int.from_bytes(digest.digest(), 'big')}.py")

    XCachingCompiler.get_code_name = get_code_name


CAPTURE_KEY = "pi_repl_capture"
"""The user expression the host adds to a user cell of a durable session (``snapshot.capture``)."""


def _capture_after_every_cell(kernel_class):
    """Evaluate ``CAPTURE_KEY`` after the cell whatever its status, before the reply goes."""
    original = kernel_class.do_execute

    async def do_execute(self, code, silent, store_history=True, user_expressions=None,
                         allow_stdin=False, **kwargs):
        capture = None
        if user_expressions and CAPTURE_KEY in user_expressions:
            user_expressions = dict(user_expressions)
            capture = user_expressions.pop(CAPTURE_KEY)
        reply = await original(self, code, silent, store_history, user_expressions,
                               allow_stdin, **kwargs)
        if capture is not None and isinstance(reply, dict):
            expressions = reply.get("user_expressions")
            if not isinstance(expressions, dict):
                expressions = reply["user_expressions"] = {}
            expressions.update(self.shell.user_expressions({CAPTURE_KEY: capture}))
        return reply

    kernel_class.do_execute = do_execute


def _usage_errors_as_errors(shell_class):
    """Report a UsageError as the cell's error (an ``error`` message), not a line on stderr.

    IPython prints ``UsageError: ...`` on stderr and ipykernel still ends the cell with an error
    whose traceback is empty, so the same sentence would reach the reader twice.
    """
    from IPython.core.error import UsageError

    def show_usage_error(self, exc):
        self._showtraceback(UsageError, exc, [f"UsageError: {exc}"])

    shell_class.show_usage_error = show_usage_error


APP_ARGS = [
    "--IPKernelApp.quiet=True",
    "--HistoryManager.enabled=False",
    "--InteractiveShell.colors=nocolor",
    # IPython culls (and warns into the cell) at this size; cell_history keeps far fewer.
    "--InteractiveShell.cache_size=1000",
    "--IPKernelApp.trio_loop=False",
]
"""What ``main`` adds to IPKernelApp's arguments (a live fork's new app takes the same)."""


def main(argv=None):
    """Start the kernel. ``argv`` are IPKernelApp arguments (at least ``-f <connection file>``)."""
    args = list(sys.argv[1:] if argv is None else argv)
    connection_file = _connection_file(args)
    # First, while this process has one thread: maybe become the launcher of a namespaced kernel.
    namespace.enter(os.path.dirname(os.path.abspath(connection_file)) if connection_file else None)
    _restore_glibc_tunables()
    _take_lifeline()
    environment.adopt_own_interpreter()
    # Skipping the debugger: importing debugpy costs start-up time and warns into the first cell.
    sys.modules["debugpy"] = None
    try:
        from ipykernel.kernelapp import IPKernelApp
        from ipykernel.iostream import OutStream
        from ipykernel.ipkernel import IPythonKernel
        from ipykernel.kernelbase import Kernel
        from ipykernel.zmqshell import ZMQInteractiveShell
        from IPython.core.error import StdinNotImplementedError

        from pi_repl_kernel import cell_history, packages, thread_output
    except ImportError as error:
        print(
            f"pi-repl: this interpreter cannot run the kernel: {error}",
            file=sys.stderr,
            flush=True,
        )
        sys.exit(EXIT_MISSING_KERNEL)

    _refuse_input(Kernel, StdinNotImplementedError)
    write = _bound_stream_messages(OutStream)
    _stream_errors_end_at_the_cell(ZMQInteractiveShell, write)
    _fast_cell_names()
    iopub_pipe_over_ipc(connection_file)
    _usage_errors_as_errors(ZMQInteractiveShell)
    _capture_after_every_cell(IPythonKernel)
    thread_output.install()

    global started_by, initial_environment
    started_by = connection_file
    initial_environment = dict(os.environ)
    args += APP_ARGS
    app = IPKernelApp.instance()
    app.initialize(args)
    cell_history.install(app.kernel.shell)
    packages.install_pip_magic(app.kernel.shell)
    # ipykernel has cached "no debugger"; a cell may still import debugpy for its own use.
    del sys.modules["debugpy"]
    report_crashes_to_host()
    app.start()


def _restore_glibc_tunables():
    """Put the user's ``GLIBC_TUNABLES`` back (unset if they had none): the host added glibc's
    huge-page tunable for this process's heap (read by glibc when the process started;
    ``src/kernel/huge_pages.rs``), and what a cell starts should not inherit it."""
    original = os.environ.pop("PI_REPL_ORIGINAL_GLIBC_TUNABLES", None)
    if original is None:
        return
    from pi_repl_kernel import heap_pages

    heap_pages.enabled = True  # the host wants the heap on huge pages: small objects too
    if original:
        os.environ["GLIBC_TUNABLES"] = original
    else:
        os.environ.pop("GLIBC_TUNABLES", None)


def _connection_file(args):
    """The ``-f``/``--f`` argument (the host always passes one)."""
    for at, arg in enumerate(args):
        if arg in ("-f", "--f") and at + 1 < len(args):
            return args[at + 1]
        if arg.startswith("--f="):
            return arg[len("--f="):]
    return None


def iopub_pipe_over_ipc(connection_file):
    """Bind the IOPub pipe for forked children to ``<runtime dir>/kernel-iopub-pipe`` (IPC).

    ipykernel binds it to a random loopback TCP port that any local process can connect to.
    The runtime directory is private (0700) and holds the kernel's other sockets. Without a
    connection file (never the case under the host) ipykernel's own behaviour stays.
    """
    if not connection_file:
        return
    import zmq
    from ipykernel.iostream import IOPubThread
    from zmq.eventloop.zmqstream import ZMQStream

    address = "ipc://" + os.path.join(os.path.dirname(os.path.abspath(connection_file)),
                                      "kernel-iopub-pipe")

    def _setup_pipe_in(self):
        self._pipe_uuid = os.urandom(16)
        pipe_in = self.socket.context.socket(zmq.PULL)
        pipe_in.linger = 0
        pipe_in.bind(address)
        self._pipe_in = ZMQStream(pipe_in, self.io_loop)
        self._pipe_in.on_recv(self._handle_pipe_msg)

    def _setup_pipe_out(self):
        # A new context: this runs in the forked child.
        ctx = zmq.Context()
        pipe_out = ctx.socket(zmq.PUSH)
        pipe_out.linger = 3000  # 3 s, as ipykernel: output of a child that exits is not lost
        pipe_out.connect(address)
        return ctx, pipe_out

    IOPubThread._setup_pipe_in = _setup_pipe_in
    IOPubThread._setup_pipe_out = _setup_pipe_out


def report_crashes_to_host():
    """On a fatal signal (segfault, abort), write the Python stack to the host's stderr pipe.

    ipykernel redirects fd 2 into the cell output; the original stderr (the host's pipe) lives
    on as ``_original_stdstream_copy``. The host quotes these lines when it reports the death.
    """
    import faulthandler

    fd = getattr(sys.stderr, "_original_stdstream_copy", None)
    faulthandler.enable(file=fd if fd is not None else 2, all_threads=False)
