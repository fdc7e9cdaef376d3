"""Start the kernel in its own user, PID and mount namespace, so a cell sees only its own processes.

Why: the agent that started pi-repl (Claude Code, Codex, pi) is a process of the same user and
usually holds its API key in its environment; any cell could read ``/proc/<agent pid>/environ``.
In a PID namespace with a fresh ``/proc`` no ancestor exists for a cell: not the agent, not the
host, not another process of the user.

Process layout when isolated (the host asks with ``ISOLATE_VAR=1``)::

    host
     └─ launcher   the process the host started: outside the PID namespace, leads the process
        │          group the host signals, exits as the kernel did (code or signal) as soon
        │          as init reports it
        └─ init    pid 1 of the namespace, in a process group of its own (the host's group
           │       signals miss it), named ``INIT_NAME``: reaps orphans of cells, forwards
           │       nothing; when the kernel ends it reports how, kills every process left in
           │       the namespace except save children, waits for those (at most
           │       ``SAVE_WAIT_S``), and exits, which SIGKILLs whatever is left
           └─ kernel  pid 2: ipykernel and everything a cell starts
              └─ save child  a snapshot save (``snapshot_fork``): a group of its own, outlives
                             the kernel and the host so an answered cell's state commits

The user's own uid and gid are mapped to themselves (not to root): a file a cell writes has the
same owner as one the user writes. Root gets PID and mount namespaces without a user namespace:
in one, root would lose its power over files of unmapped users and over the host's network
(low ports, raw sockets); root can undo the isolation anyway. The kernel is not pid 1, so Python's ``subprocess`` keeps
its children's exit statuses (init reaps only orphans, which become its children), and a
``Popen(..., start_new_session=True)`` or ``bash()`` command still ends with the kernel.

The kernel gives up every capability: a process that made (or was forked in) a user namespace
holds all of them there, and a cell could use them to unmount the fresh ``/proc`` and see the
host's again. It drops them with ``capset``; should that fail, it execs itself instead
(``execv`` as a non-root user leaves none). Root keeps its own (it could undo all of this
anyway).

The host reads what happened from ``STATUS_NAME`` in the kernel's runtime directory, written
before the kernel process exists: ``{"isolated": true}`` or ``{"isolated": false, "reason": ...}``.
Where user namespaces are unavailable (a sysctl, AppArmor's user-namespace restriction, a
container's seccomp filter) nothing is changed and the kernel starts as before; a throwaway
child tries first, because a namespace that cannot map the user cannot be left again.
``UNAVAILABLE_VAR`` pretends unavailability (its value is the reason), for tests.
"""

import os
import signal
import sys

ISOLATE_VAR = "PI_REPL_ISOLATE"
"""Set to ``1`` by the host when the kernel is to start in its own namespaces."""

UNAVAILABLE_VAR = "PI_REPL_NAMESPACE_UNAVAILABLE"
"""When set, isolation is treated as unavailable with this value as the reason (for tests)."""

HOST_ID_VAR = "PI_REPL_HOST_ID"
"""Set by the host: its pid and start time (``<pid>.<ticks>``). A kernel in a PID namespace of
its own cannot see its host; the revive journal and sub-agent records name it by this."""

STATUS_VAR = "PI_REPL_NAMESPACE_STATUS"
"""Passed to the exec'd kernel: what ``enter`` decided (JSON), so it does not try again."""

STATUS_NAME = "isolation.json"
"""The file in the runtime directory that tells the host whether the kernel is isolated."""

EXIT_CANNOT_ISOLATE = 86
"""Exit status when the namespace was made but the user could not be mapped into it."""

_CLONE_NEWNS = 0x00020000
_CLONE_NEWUSER = 0x10000000
_CLONE_NEWPID = 0x20000000
_MS_NOSUID = 0x2
_MS_NODEV = 0x4
_MS_NOEXEC = 0x8
_MS_REC = 0x4000
_MS_PRIVATE = 0x40000
_PR_SET_PDEATHSIG = 1

INIT_NAME = b"pi-repl-init"
"""Init's process name (``/proc/<pid>/comm``): the host's sweep of a kernel's processes spares
it, so it can wait for a save child after the kernel is gone."""

SAVE_CHILD_NAME = b"pi-repl-save"
"""A save child's process name (``snapshot_fork.CHILD_NAME``)."""

SAVE_WAIT_S = 600
"""How long init waits for save children once the kernel has ended (each also ends itself
after its own limit)."""

_PR_SET_NAME = 15

_FORWARDED_TO_KERNEL = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
"""Signals the launcher ignores: the host sends them to the whole group, the kernel included."""

_status = {"isolated": False, "reason": "not requested"}


def status():
    """What ``enter`` decided, as written to ``STATUS_NAME`` (in the kernel process)."""
    return dict(_status)


def isolated():
    """True in a kernel that runs in its own PID namespace with a fresh ``/proc``."""
    return bool(_status.get("isolated"))


def enter(runtime_dir):
    """Put the rest of this process's life in the kernel's namespaces, if the host asked.

    Called first by ``launch.main``, while the process has one thread (``unshare`` of a user
    namespace refuses a threaded caller). Returns in the process that is to run the kernel: this
    one when isolation is off or unavailable, else pid 2 of the new namespace (this process
    becomes the launcher and never returns).
    """
    global _status
    decided = os.environ.pop(STATUS_VAR, None)
    if decided is not None:  # the exec'd kernel, pid 2 of the namespace
        import json

        _status = json.loads(decided)
        return
    wanted = os.environ.pop(ISOLATE_VAR, None) == "1"
    simulated = os.environ.pop(UNAVAILABLE_VAR, None)
    if not wanted:
        return
    reason = simulated or _probe()
    if reason:
        _status = {"isolated": False, "reason": reason}
        _write_status(runtime_dir, _status)
        return
    uid, gid = os.getuid(), os.getgid()
    try:
        _unshare(_namespaces(uid))
    except OSError as error:  # nothing changed: start as before
        _status = {"isolated": False, "reason": _why(error, "unshare")}
        _write_status(runtime_dir, _status)
        return
    try:
        if uid != 0:
            _map_ids(uid, gid)
    except OSError as error:  # the probe passed; a namespace without the user cannot go on
        print(f"pi-repl: cannot map the user into the kernel's namespace: {error}; "
              "set PI_REPL_PROCESS_ISOLATION=0", file=sys.stderr, flush=True)
        os._exit(EXIT_CANNOT_ISOLATE)
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in _FORWARDED_TO_KERNEL}
    kernel_status_read, kernel_status_write = os.pipe()
    init = os.fork()
    if init:
        os.close(kernel_status_write)
        _launcher(init, kernel_status_read)  # never returns
    os.close(kernel_status_read)
    _init(runtime_dir, kernel_status_write, previous, uid)


def _launcher(init, kernel_status_read):
    """End as the kernel ended (its exit code, or its signal) as soon as init reports it: init
    may go on a while for a save child, which must not hold up the host."""
    try:
        reported = os.read(kernel_status_read, 64)  # blocks until reported, or init is gone
    except OSError:
        reported = b""
    try:
        wait_status = int(reported)
    except ValueError:  # init ended before the kernel did: say how init ended
        try:
            _, wait_status = os.waitpid(init, 0)
        except ChildProcessError:
            wait_status = 1 << 8
    if os.WIFSIGNALED(wait_status):
        number = os.WTERMSIG(wait_status)
        try:
            signal.signal(number, signal.SIG_DFL)
        except (OSError, ValueError):
            pass  # SIGKILL and SIGSTOP have no handler to reset
        try:
            os.kill(os.getpid(), number)
        except OSError:
            pass
        os._exit(128 + number)
    os._exit(os.waitstatus_to_exitcode(wait_status) if os.WIFEXITED(wait_status) else 1)


def _init(runtime_dir, kernel_status_write, previous, uid):
    """As pid 1: give the namespace its own ``/proc``, fork the kernel, reap until it ends.

    Returns in the kernel (pid 2), without capabilities unless root.
    """
    global _status
    reason = None
    try:
        _unshare(_CLONE_NEWNS)
        _mount(None, "/", None, _MS_REC | _MS_PRIVATE)
        _mount("proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    except OSError as error:
        reason = _why(error, "mount")
    _status = {"isolated": reason is None, "reason": reason, "layout": "namespace"}
    _write_status(runtime_dir, _status)
    kernel = os.fork()
    if kernel == 0:
        os.close(kernel_status_write)
        _die_with_parent()  # kept across execv
        # ipykernel's parent poller exits when the parent is pid 1, which init is; the
        # lifeline on fd 0 already ends the kernel when the host goes.
        os.environ.pop("JPY_PARENT_PID", None)
        if uid != 0:
            try:
                _drop_capabilities()
            except OSError:
                _exec_without_capabilities(previous)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        return
    # Out of the group the host signals (the kernel stays in it), so a kill of the kernel's
    # group leaves init to see save children through; named for the host's sweep to spare.
    try:
        os.setpgid(0, 0)
    except OSError:
        pass
    _set_name(INIT_NAME)
    while True:
        try:
            pid, wait_status = os.wait()
        except ChildProcessError:
            os._exit(1)
        if pid == kernel:
            try:
                os.write(kernel_status_write, str(wait_status).encode())
                os.close(kernel_status_write)
            except OSError:
                pass
            if reason is not None:
                # No /proc of its own: it cannot tell the namespace's processes from the
                # machine's, so it ends the namespace at once (save children with it).
                os._exit(0)
            _after_the_kernel()


def _after_the_kernel():
    """Kill what cells left, wait for save children (bounded), then exit: the namespace ends
    with its init, and everything still in it is killed. Only with the namespace's own
    ``/proc`` mounted (it lists the namespace's processes alone)."""
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    signal.alarm(SAVE_WAIT_S)
    try:
        while True:
            savers = 0
            for pid, name in _processes():
                if name == SAVE_CHILD_NAME:
                    savers += 1
                else:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
            if not savers:
                break
            try:
                os.wait()
            except ChildProcessError:
                break
    finally:
        os._exit(0)


def _processes():
    """(pid, name) of every other process in the namespace (init's own ``/proc``)."""
    me = os.getpid()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/comm", "rb") as file:
                found.append((int(entry), file.read().strip()))
        except OSError:
            continue
    return found


def _set_name(name):
    import ctypes

    try:
        _call("prctl", ctypes.c_int(_PR_SET_NAME), ctypes.c_char_p(name), ctypes.c_ulong(0),
              ctypes.c_ulong(0), ctypes.c_ulong(0))
    except OSError:
        pass


def _exec_without_capabilities(previous):
    """Start this interpreter again with the same arguments: ``execv`` as a non-root user
    leaves no capability. Returns only if that fails (the kernel then keeps them)."""
    import json

    os.environ[STATUS_VAR] = json.dumps(_status)
    for sig in previous:  # an ignored signal would stay ignored across execv
        signal.signal(sig, signal.SIG_DFL)
    try:
        os.execv(sys.executable, sys.orig_argv)
    except OSError as error:
        print(f"pi-repl: the kernel keeps its namespace's capabilities ({error})",
              file=sys.stderr, flush=True)
        os.environ.pop(STATUS_VAR, None)


def _probe():
    """Why the kernel cannot get its own namespaces here, or None.

    A forked child tries what ``enter`` does up to mapping the user: AppArmor's restriction
    lets ``unshare`` succeed and refuses the map, which the real attempt could not undo.
    """
    if not sys.platform.startswith("linux"):
        return f"namespaces are Linux only (this is {sys.platform})"
    uid, gid = os.getuid(), os.getgid()
    if uid == 0:
        return None  # no user namespace to map: a failed unshare leaves nothing to undo
    read, write = os.pipe()
    child = os.fork()
    if child == 0:
        code = 0
        try:
            os.close(read)
            try:
                _unshare(_namespaces(uid))
            except OSError as error:
                os.write(write, _why(error, "unshare").encode())
                code = 1
            else:
                try:
                    if uid != 0:
                        _map_ids(uid, gid)
                except OSError as error:
                    os.write(write, _why(error, "map").encode())
                    code = 1
        finally:
            os._exit(code)
    os.close(write)
    message = b""
    try:
        while chunk := os.read(read, 4096):
            message += chunk
    finally:
        os.close(read)
    _, wait_status = os.waitpid(child, 0)
    if message:
        return message.decode("utf-8", "replace")
    if wait_status != 0:
        return "the namespace probe failed"
    return None


def _namespaces(uid):
    """The namespaces to unshare before the fork: a user namespace too, unless root."""
    return _CLONE_NEWPID if uid == 0 else _CLONE_NEWUSER | _CLONE_NEWPID


def _why(error, step):
    """A sentence for the notice: what failed, and the usual cause."""
    name = os.strerror(error.errno) if error.errno else str(error)
    if step == "unshare":
        causes = {
            1: "user namespaces are refused here (a container's seccomp filter, or "
               "kernel.unprivileged_userns_clone=0)",
            28: "no user namespace may be created (user.max_user_namespaces is 0 or reached)",
            22: "this process cannot create a user namespace (already in a restricted one?)",
        }
        return causes.get(error.errno, f"unshare failed ({name})")
    if step == "map":
        return ("the user cannot be mapped into a new user namespace (AppArmor's "
                f"restriction of unprivileged user namespaces?): {name}")
    return f"a fresh /proc cannot be mounted in the kernel's namespace ({name})"


_libc = None


def _call(name, *args):
    """Call libc's ``name``; raise ``OSError`` when it fails. ``ctypes`` is imported only here:
    a kernel started without isolation does not pay for it."""
    global _libc
    import ctypes

    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    if getattr(_libc, name)(*args) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))


def _unshare(flags):
    import ctypes

    _call("unshare", ctypes.c_int(flags))


def _encoded(text):
    return None if text is None else text.encode()


def _mount(source, target, fstype, flags):
    import ctypes

    _call("mount", _encoded(source), _encoded(target), _encoded(fstype), ctypes.c_ulong(flags),
          None)


def _die_with_parent():
    import ctypes

    _call("prctl", ctypes.c_int(_PR_SET_PDEATHSIG), ctypes.c_ulong(signal.SIGKILL),
          ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0))


_CAPABILITY_VERSION_3 = 0x20080522


def _drop_capabilities():
    """Empty this process's effective, permitted and inheritable capability sets (``capset``,
    version 3: two 32-bit words per set)."""
    import ctypes

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                    ("inheritable", ctypes.c_uint32)]

    _call("capset", ctypes.byref(Header(_CAPABILITY_VERSION_3, 0)), (Data * 2)())


def _map_ids(uid, gid):
    """Map the user's uid and gid to themselves in the new user namespace."""
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"),
                       ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w") as file:
            file.write(text)


def _write_status(runtime_dir, status_value):
    """Write ``STATUS_NAME`` atomically (the host reads it once the kernel answers)."""
    if not runtime_dir:
        return
    path = os.path.join(runtime_dir, STATUS_NAME)
    temporary = path + ".tmp"
    import json

    try:
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as file:
            json.dump(status_value, file)
        os.replace(temporary, path)
    except OSError as error:
        print(f"pi-repl: cannot write {path}: {error}", file=sys.stderr, flush=True)
