"""Saving from a forked child of the kernel, the way Redis' BGSAVE does.

Owns: deciding whether a save may fork (and why not), the fork itself, everything the child
does (silence its output, ignore SIGINT, die with its parent, run the ordinary save on its
copy-on-write image of the namespace, write its report, ``os._exit``), reaping the child, and
folding a committed child save into the parent's in-memory store. Does not own the save
algorithm (``snapshot_save``, which the child runs unchanged) or the file formats.

The path of a background save:

1. ``start`` (the host's silent ``save(background=True)`` call, between cells): if fork is
   unsafe (``fork_unsafe_reason``) the save runs in-process as before and says why; if free
   memory is below what copy-on-write could need (``memory_shortfall``) nothing is saved and it
   says so; otherwise the parent copies what it must remember (the namespace's bindings, the
   store's tracked/held/pending records), forks, and returns at once with the child's pid.
2. The child never touches the kernel's sockets, IPython's output machinery, or locks other
   threads may hold: fds 1 and 2 go to ``/dev/null``, ``sys.stdout``/``sys.stderr`` are
   replaced, logging is disabled, the garbage collector is off (a finaliser of a ZMQ object
   must not run), SIGINT is ignored. It **outlives its kernel and its host**: it leads a
   process group of its own (the group signals that interrupt or kill the kernel miss it), is
   named ``CHILD_NAME`` (``/proc/<pid>/comm``: the namespace's init, the host's and the
   lifeline's sweeps of the kernel's processes leave it alone), has no parent-death signal,
   and ends itself after ``store.child_limit_s`` (``signal.alarm``). It takes the session's save
   lock (``LOCK_NAME``, ``flock``) before it writes anything and holds it until it exits, so
   saves commit one after another, across kernels and runs; the next start waits for the lock
   before it reads the manifest. It runs ``snapshot_save.save`` on its copy (the manifest is
   committed atomically, as always), writes its report atomically, and ``os._exit``s
   without running any exit handler.
3. ``status`` (the host's ``save_status()``, when the child's exit is seen or its time is up):
   reaps the child with ``waitpid(WNOHANG)`` (killing it first when asked), reads its report and,
   if it committed, updates the parent's store from it (``_adopt_child_commit``).

Invariants:

- At most one save child saves at a time (the lock). A capture (``start(capture=True)``, at an
  answer) while one runs forks a second child that waits for the lock; a newer capture kills
  that waiting one and takes its place without waiting for it to die (``store.dying``: reaped
  later without blocking; it holds the lock until it is gone, so nothing it may have begun
  overlaps the next save, and the new child removes its temp files once it holds the lock). A background ``start`` while
  one runs answers ``running``.
- The parent's store changes only when it has learnt that the child committed: bindings are
  tracked with the objects they were bound to *at the fork*, so a binding rebound since is due
  again, and one changed in place since is re-checked by the next save's fingerprint (or seen by
  the hint or full-save rule of ``snapshot_save``). Records the parent made since the fork (a
  pending binding revived on demand) are kept when the new manifest still holds the same entry.
  Known item chunks (``snapshot_items``): the child reports which chunks it found identical to
  the parent's records at the fork; the parent keeps those and takes the others' items from the
  value now, as candidates that a later save compares but never trusts.
- A child that did not commit (it failed, hung and was killed, or was SIGKILLed) changes
  nothing the parent believes; its temp files are removed and the next save sweeps the blobs it
  may have left. The committed manifest is never at risk: it is only ever replaced by a rename.
"""

import copyreg
import fcntl
import ctypes
import ctypes.util
import gc
import json
import logging
import os
import signal
import sys
import time
import types
import warnings

import cloudpickle

from .. import heap_pages
from . import blobs as snapshot_blobs
from . import items as snapshot_items
from . import journal as snapshot_journal
from . import manifest as snapshot_manifest
from . import names as snapshot_namespace
from . import saving as snapshot_save
from . import kept_states as snapshot_states
from .store import REBOUND, Tracked, fingerprint_of, identity_ref, let_go_of_rebound

REPORT_NAME = "save-child.json"
"""The report a save child writes beside the manifest (atomically) before it exits. A child
that waited for the lock writes ``save-child-<pid>.json`` instead (two may finish unreaped)."""

LOCK_NAME = "save.lock"
"""The session's save lock: a save child holds it (``flock``) from before it writes anything
until it exits."""

CHILD_NICENESS = 10
"""How much a save child lowers its CPU priority (``nice``): it works in the background, and
on a busy machine the kernel answering the agent's next call should not wait behind it. It
still gets the CPU the kernel and host leave idle (most of the time between calls); only a
save racing a busy kernel on every core is slower."""

CHILD_NAME = b"pi-repl-save"
"""A save child's process name (``/proc/<pid>/comm``), by which sweeps of the kernel's
processes tell it apart."""

FORK_ENV = "PI_REPL_SNAPSHOT_FORK"
"""The host's setting (``0``: save in-process); the host reads it and passes ``configure(fork=)``,
this module only names it in its reason."""

_PR_SET_NAME = 15


class Child:
    """A running save child, and what the parent must remember to adopt its commit."""

    __slots__ = ("pid", "started", "fork_ms", "namespace", "tracked", "held", "parent_pid",
                 "token", "report", "leftovers_of")

    def __init__(self, store):
        self.pid = None
        self.started = time.monotonic()
        self.fork_ms = None
        # Strong references to the objects bound at the fork: the parent must compare identity
        # with exactly these after the child commits. One whose name the parent rebinds is let
        # go then (``store.let_go_of_rebound``: ``REBOUND`` takes its place).
        self.namespace = dict(store.namespace)
        self.tracked = dict(store.tracked)
        self.held = dict(store.held)
        self.parent_pid = os.getpid()
        # Names this child in its report and manifest beside its pid, which repeats across
        # kernels in PID namespaces of their own (each counts from 1).
        self.token = os.urandom(8).hex()
        # Where it reports: a child that waits behind another may finish before the first is
        # reaped, so such a child has a report of its own.
        self.report = None
        # Pids of replaced children whose temp files this one removes once it holds the lock
        # (then none of them can still be writing): off the answer's path (``start``).
        self.leftovers_of = ()


def fork_unsafe_reason(allowed=True):
    """Why a save must not fork in this process now, or None."""
    if not allowed:
        return f"{FORK_ENV}=0"
    if not hasattr(os, "fork"):
        return "this platform has no fork()"
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            if torch.cuda.is_initialized():
                return "CUDA is initialised in this kernel, and a forked child cannot use it"
        except Exception:  # a broken torch: say nothing about CUDA, fork as usual
            pass
    return None


def memory_shortfall():
    """Why there may not be memory for a copy-on-write child, or None.

    The rule: fork only while ``MemAvailable`` (``/proc/meminfo``) is at least the kernel's
    resident size (``VmRSS``), which is what copy-on-write needs if a cell rewrote every page
    while the child runs. Where these figures cannot be read, the save forks.
    """
    available = _proc_kib("/proc/meminfo", "MemAvailable:")
    resident = _proc_kib("/proc/self/status", "VmRSS:")
    if available is None or resident is None or available >= resident:
        return None
    return (f"not saved: only {_mib(available)} of memory is free, less than the kernel's "
            f"{_mib(resident)} that a copy-on-write save may need")


def _proc_kib(path, field):
    try:
        with open(path, "rb") as file:
            for line in file:
                if line.startswith(field.encode()):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def _mib(kib):
    return f"{kib / 1024:.0f} MiB"


def start(store, hint_names=None, full=False, allowed=True, cells=None, capture=False):
    """Start a background save; return the summary dict of the API (see the module docstring).

    ``capture``: called at an answer (``snapshot.capture``): fork even while a save child runs
    (the new one waits for the lock; one already waiting is replaced, and its pid named in
    ``replaced``), and never save in-process (the answer would wait for the whole save): say
    ``in_process`` instead and leave the save to the host's background call.
    """
    if store.child is not None and not capture:
        return {"committed": False, "running": True, "pid": store.child.pid}
    refusal = snapshot_save._refusal(store)
    if refusal:
        return {"committed": False, "error": refusal}
    unsafe = fork_unsafe_reason(allowed)
    if unsafe:
        if capture:
            return {"committed": False, "in_process": unsafe}
        if cells is not None:
            store.cells = cells
        summary = snapshot_save.save(store, hint_names=hint_names, full=full)
        summary["in_process"] = unsafe
        return summary
    short = memory_shortfall()
    if short:
        return {"committed": False, "low_memory": short, "error": short}
    reap_dying(store)
    replaced = None
    if store.waiting is not None:
        # Not waited for: a big process takes tens of milliseconds to die, and this answer
        # would wait for it. Its temp files go once it is reaped; its lock goes with it.
        replaced = store.waiting.pid
        _kill(replaced)
        store.dying.append((replaced, store.waiting.report))
        store.leftovers.append(replaced)
        store.swept = False  # the next save sweeps the blobs it may have left
        store.waiting = None
    _cache_class_state(store.namespace)
    child = Child(store)
    child.leftovers_of = tuple(store.leftovers)
    waits = store.child is not None
    if not waits:
        child.report = report_path(store)
        _remove_quietly(child.report)
    hints = list(hint_names or ())
    _prepare_child_calls()
    # The child has the lock file open from its first instant (the host waits while any
    # process has it open), before it takes the lock itself.
    lock = os.open(os.path.join(store.state_dir, LOCK_NAME),
                   os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    # No SIGINT between the fork and the parent recording the child (the pid must not be lost),
    # nor in the child before it ignores SIGINT.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        started = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "fork() in a multi-threaded process" (3.12+)
            pid = os.fork()
        if pid == 0:
            _child_main(store, hints, full, child, cells, lock)  # never returns
        child.pid = pid
        child.fork_ms = round((time.perf_counter() - started) * 1000, 2)
        if waits:
            child.report = report_path(store, pid)
            store.waiting = child
        else:
            store.child = child
        store.captured = _saveable(store)
        store.captured_through = snapshot_states.cell_of({"cells": cells})
        store.leftovers = []  # the child removes them (or, killed first, the blob sweep does)
    finally:
        os.close(lock)  # the child's copy holds it
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    summary = {"committed": False, "started": True, "pid": pid, "token": child.token,
               "fork_ms": child.fork_ms}
    if waits:
        summary["waits_for"] = store.child.pid
    if replaced is not None:
        summary["replaced"] = replaced
    return summary


def reap_dying(store):
    """Reap the replaced children that have died (never waits) and remove a report one may
    have renamed into place before the kill landed. Their temp files are not looked for here
    (listing every blob directory cost tens of milliseconds an answer with a big workspace):
    the child forked after them removes them (``Child.leftovers_of``)."""
    still = []
    for pid, report in store.dying:
        if _reap(pid, block=False) is _RUNNING:
            still.append((pid, report))
            continue
        _remove_quietly(report)
    store.dying = still


def unchanged_since_capture(store, hint_names):
    """True when the namespace holds exactly the objects it held at the last capture that
    forked, and no name the cell mentioned is bound to a value that could have changed in
    place: that capture's image already holds this state."""
    captured = store.captured
    if captured is None:
        return False
    now = _saveable(store)
    if len(now) != len(captured):
        return False
    for name, value in now.items():
        if captured.get(name, _MISSING) is not value:
            return False
    for name in hint_names or ():
        value = now.get(name, _MISSING)
        if value is not _MISSING and not isinstance(value, types.ModuleType) \
                and not snapshot_namespace.is_immutable(value):
            return False
    return True


_MISSING = object()


def _saveable(store):
    """The bindings a save would look at (IPython's history names and the tool's own left out:
    they change with every cell)."""
    hidden, protected = store.hidden_names(), store.protected
    return {name: value for name, value in list(store.namespace.items())
            if isinstance(name, str)
            and not snapshot_namespace.is_excluded(name, value, hidden, protected)}


def _cache_class_state(namespace):
    """Pickling caches state on a class: ``__slotnames__`` (copyreg) and cloudpickle's random
    tracker id of a class pickled by value. Done in the child only, the parent's class would
    pickle differently from what the child saved, and be written again by the next save; so the
    parent does it first for the classes bound by name. (A class reachable only inside another
    value may still be written once more.)"""
    tracker_id = getattr(cloudpickle.cloudpickle, "_get_or_create_tracker_id", None)
    for value in list(namespace.values()):
        if not isinstance(value, type):
            continue
        try:
            if "__slotnames__" not in vars(value):
                copyreg._slotnames(value)
            if tracker_id is not None:
                tracker_id(value)
        except Exception:  # an odd class: the next save writes it once more, no harm
            pass


def report_path(store, pid=None):
    """Where a save child reports: ``REPORT_NAME`` for one that saves at once, one file per
    pid for one that waited behind another."""
    if pid is None:
        return os.path.join(store.state_dir, REPORT_NAME)
    return os.path.join(store.state_dir, f"save-child-{pid}.json")


# -- the child -------------------------------------------------------------------------------

_prctl = None


def _prepare_child_calls():
    """Resolve what the child calls through ctypes now: loading a library in the child could
    wait for the loader lock another thread held at the fork."""
    global _prctl
    if _prctl is not None or not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        _prctl = libc.prctl
    except (OSError, AttributeError):
        _prctl = False


def _child_main(store, hints, full, child, cells, lock):
    code = 1
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        _leave_the_kernel(store)
        _silence()
        gc.disable()
        store.preempt_path = None  # the host's cooperative preempt is for in-process saves
        store.save_token = child.token
        store.cells = cells
        report = child.report or report_path(store, os.getpid())  # behind another: its own
        _take_save_lock(store, lock)
        _remove_temp_files(store, child.leftovers_of)
        try:
            summary = snapshot_save.save(store, hint_names=hints, full=full)
        except BaseException as error:  # the report says what went wrong; nothing was committed
            summary = {"committed": False, "error": f"{type(error).__name__}: {error}"}
        result = {"pid": os.getpid(), "token": child.token, "summary": summary}
        if summary.get("committed"):
            result["store"] = _child_store_state(store)
        data = json.dumps(result, sort_keys=True).encode("utf-8")
        snapshot_manifest.write_atomically(report, data)
        code = 0
    except BaseException:  # nothing may escape into the kernel's code in the child
        code = 1
    finally:
        os._exit(code)


def _leave_the_kernel(store):
    """Outlive the kernel and the host: a process group of its own, a name the sweeps of the
    kernel's processes spare, no parent-death signal, and a deadline of its own; and give way
    to the kernel (``CHILD_NICENESS``)."""
    try:
        os.setpgid(0, 0)
    except OSError:
        pass  # it still saves; only a group kill of the kernel would end it
    if _prctl:
        _prctl(_PR_SET_NAME, ctypes.c_char_p(CHILD_NAME), 0, 0, 0)
    try:
        os.nice(CHILD_NICENESS)
    except OSError:
        pass  # it saves at the kernel's priority
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    signal.alarm(max(1, int(store.child_limit_s)))


def _take_save_lock(store, descriptor):
    """Wait for the save lock on ``descriptor`` (open since the fork; a child forked behind
    another waits here for it to finish), then save against the manifest on disk: the one
    before may have committed meanwhile."""
    fcntl.flock(descriptor, fcntl.LOCK_EX)  # held until this process exits
    try:
        with open(store.manifest_path, "rb") as file:
            store.generation_floor = int(json.loads(file.read()).get("generation", 0))
    except (OSError, ValueError, TypeError, AttributeError):
        pass
    _catch_up_with_disk(store)


def _catch_up_with_disk(store):
    """Make this child's store describe the manifest on disk, not the one of its fork.

    A child that waited behind another forked with the kernel's record of the commit before
    that one. Its record of a binding says "this object is stored as this entry, skip it"; if the
    child before committed another entry for that name (the binding changed, then changed back
    to the recorded object), trusting the record would leave the other entry in place, and its
    blobs may be gone. So a record is kept only where the manifest on disk holds the same entry;
    the others are saved afresh. Blobs are reused only if the manifest on disk names them."""
    try:
        body = snapshot_manifest.read(store.state_dir, store.key)
    except Exception:  # unreadable: keep the fork's view; the commit replaces it
        return
    committed = store.committed
    if body is not None and committed is not None and \
            body.get("generation") == committed.get("generation") and \
            body.get("saved_by_token") == committed.get("saved_by_token"):
        return  # nothing was committed since the fork
    if body is None:
        store.committed, store.committed_files = None, set()
        store.tracked = {}
        return
    store.adopt_committed(body)
    on_disk = body.get("bindings", {})
    store.tracked = {name: record for name, record in store.tracked.items()
                     if on_disk.get(name) == record.entry}


def _silence():
    """Nothing the child prints reaches the kernel's output pipes or IOPub."""
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (1, 2):
        try:
            os.dup2(devnull, fd)
        except OSError:
            pass
    sink = open(devnull, "w", closefd=False)
    sys.stdout = sys.stderr = sink
    sys.__stdout__ = sys.__stderr__ = sink
    logging.disable(logging.CRITICAL)


def _child_store_state(store):
    """What the parent needs to adopt this child's commit (JSON)."""
    return {
        "committed": store.committed,
        "tracked": {name: _tracked_report(store, name, record)
                    for name, record in store.tracked.items()},
        "held": sorted(store.held),
        "swept": store.swept,
    }


def _tracked_report(store, name, record):
    report = {"cost": record.cost, "refs": sorted(record.ref_targets)}
    confirmed = store.confirmed_chunks.get(name)
    if confirmed is not None:
        report["confirmed"] = confirmed  # which item chunks matched the kernel's records
    return report


# -- the parent, after the child ------------------------------------------------------------

def status(store, kill=False):
    """Reap a finished save child and adopt its commit; see the API's ``save_status``."""
    reap_dying(store)
    child = store.child
    if store.unreported:
        # Collected inside a cell (``snapshot.save_for_fork``): its summary is still the host's.
        return {"running": False, "finished": store.unreported.pop(0), "next": _next_pid(store)}
    if child is None:
        return {"running": False}
    killed = False
    wait_status = _reap(child.pid, block=False)
    if isinstance(wait_status, int) and os.WIFSIGNALED(wait_status) \
            and os.WTERMSIG(wait_status) == signal.SIGALRM:
        killed = True  # it ended itself at its limit: a time-out like the host's kill
    if wait_status is _RUNNING:
        if not kill:
            return {"running": True, "pid": child.pid,
                    "elapsed_s": round(time.monotonic() - child.started, 3)}
        _kill(child.pid)
        killed = True
        wait_status = _reap(child.pid, block=True)
    store.child, store.waiting = store.waiting, None  # one that waited is next
    report = _read_report(child)
    summary = report.get("summary") if report else None
    if summary and summary.get("committed") and "store" in report:
        _adopt_child_commit(store, child, report["store"])
    else:
        summary = {"committed": False, "error": _failure(summary, wait_status, killed, child)}
        _after_failed_child(store, child.pid)
    summary["pid"] = child.pid
    summary["killed"] = killed
    summary["fork_ms"] = child.fork_ms
    summary["child_s"] = round(time.monotonic() - child.started, 3)
    store.last_save = summary
    if store.child is None:
        # No child shares the heap now: fold what grew onto huge pages, so the next capture's
        # fork copies fewer page tables (``heap_pages``).
        heap_pages.maybe_collapse(lambda: store.child is not None or store.waiting is not None)
    return {"running": False, "finished": summary, "next": _next_pid(store)}


def _next_pid(store):
    """The save child the host watches next (one that waited behind the one just reaped): the
    next summary kept for the host (a cell collected both, e.g. a rewind), else the child now
    saving."""
    if store.unreported:
        return store.unreported[0].get("pid")
    return store.child.pid if store.child is not None else None


_RUNNING = object()


def _reap(pid, block):
    """The wait status of ``pid``, ``_RUNNING``, or None when someone else reaped it."""
    try:
        reaped, wait_status = os.waitpid(pid, 0 if block else os.WNOHANG)
    except ChildProcessError:
        return None  # user code reaped it (os.wait()): the report file still tells
    if reaped == 0:
        return _RUNNING
    return wait_status


def _kill(pid):
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _read_report(child):
    path, pid = child.report, child.pid
    try:
        with open(path, "rb") as file:
            report = json.loads(file.read().decode("utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    finally:
        _remove_quietly(path)
    if not isinstance(report, dict) or report.get("pid") != pid:
        return None
    return report


def _failure(summary, wait_status, killed, child):
    elapsed = time.monotonic() - child.started
    if killed:
        return (f"the save child (pid {child.pid}) did not finish in {elapsed:.0f} s and was "
                "stopped at its limit (most likely a lock another thread held at the fork)")
    if summary and summary.get("error"):
        return summary["error"]
    if wait_status is None:
        return f"the save child (pid {child.pid}) was reaped by other code; it left no report"
    if os.WIFSIGNALED(wait_status):
        number = os.WTERMSIG(wait_status)
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = f"signal {number}"
        return f"the save child (pid {child.pid}) was killed by {name}"
    return (f"the save child (pid {child.pid}) exited with status "
            f"{os.waitstatus_to_exitcode(wait_status)} without a report")


def _after_failed_child(store, pid):
    """Nothing committed: remove the child's temp files; the next save sweeps its blobs."""
    _remove_temp_files(store, (pid,))
    store.swept = False


def _remove_temp_files(store, pids):
    """Remove the temp files the processes ``pids`` (dead, or waiting for a lock this process
    holds) left in the state and blob directories. Best effort: the blob sweep removes any
    temp file older than a minute anyway."""
    if not pids:
        return
    markers = tuple(f"-{pid}-" for pid in pids)
    for directory in [store.state_dir, *_blob_dirs(store)]:
        try:
            names = os.listdir(directory)
        except OSError:
            continue
        for name in names:
            if name.startswith((".", snapshot_blobs.TEMP_PREFIX)) and ".tmp" in name \
                    and any(marker in name for marker in markers):
                _remove_quietly(os.path.join(directory, name))


def _blob_dirs(store):
    root = store.blobs.root
    try:
        return [os.path.join(root, name) for name in os.listdir(root)
                if os.path.isdir(os.path.join(root, name))]
    except OSError:
        return []


def _adopt_child_commit(store, child, state):
    """Make the parent's store describe the manifest the child committed (module docstring)."""
    body = state["committed"]
    bindings = body["bindings"]
    store.adopt_committed(body)
    store.orphans = set()  # the child removed them after its commit
    tracked = {}
    for name, record in state["tracked"].items():
        entry = bindings.get(name)
        if entry is None or entry["kind"] == "alias" or name not in child.namespace:
            continue
        refs = {ref: identity_ref(child.namespace[ref]) for ref in record["refs"]
                if ref in child.namespace}
        value = child.namespace[name]
        # A name the parent rebound since the fork (``let_go_of_rebound``) reads as changed.
        known = (_known_chunks(child, name, entry, record)
                 if "items" in entry and value is not REBOUND else ())
        tracked[name] = Tracked(value, entry, record["cost"], refs, known)
    for name, record in store.tracked.items():
        # Made by the parent since the fork (a pending binding revived on demand).
        if name not in tracked and record is not child.tracked.get(name) \
                and bindings.get(name) == record.entry:
            tracked[name] = record
    store.tracked = tracked
    let_go_of_rebound(store)
    held = {name: bindings[name] for name in state["held"]
            if name in bindings and name in store.held}
    for name, entry in store.held.items():
        if name not in held and name not in child.held and bindings.get(name) == entry:
            held[name] = entry
    store.held = held
    store.pending &= set(held)
    store.marks = snapshot_journal.PoisonMarks(store.state_dir)  # the child may have cleared some
    store.swept = store.swept or bool(state.get("swept"))


def _known_chunks(child, name, entry, record):
    """The item chunks the kernel knows once the child committed ``entry`` (in chunks of items):
    those the child found identical to the kernel's records at the fork keep them; the others
    become candidates taken from the value now (``snapshot_items.known_after_child``). A binding
    the child did not look at (not re-checked) keeps the records it had."""
    prior = child.tracked.get(name)
    confirmed = record.get("confirmed")
    if confirmed is None:
        same = prior is not None and prior.fingerprint == fingerprint_of(entry)
        return prior.known_chunks if same else ()
    chunks = entry["items"]["chunks"]
    if len(confirmed) != len(chunks):
        confirmed = [False] * len(chunks)
    return snapshot_items.known_after_child(
        child.namespace[name], entry["items"]["container"], list(zip(confirmed, chunks)),
        prior.known_chunks if prior is not None else ())


def _remove_quietly(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
