"""The snapshot store's API, called by the host from silent kernel cells.

Owns: the one ``Store`` of this kernel and the contract of each call: every function returns a
JSON-serialisable dict and never raises, except ``KeyboardInterrupt`` (the host preempting a
``save`` or ``restore``, which it then re-raises). Everything else lives in the modules below.

- ``configure(state_dir, key_file, *, max_binding_bytes, max_total_bytes, protected_names=(),
  namespace=None, fork=True, child_limit_s=600, reinstall_packages=True)`` -> ``{"ok": True}``
  or ``{"ok": False, "error": ...}``; the packages the session adds are recorded in each
  manifest and, at a revive, reinstalled unless ``reinstall_packages`` is False (``packages``)
- ``capture(arguments_json)`` -> an object whose repr is the JSON summary: evaluated as a user
  expression of every user cell of a durable session, right after the cell and before its reply
  (``launch``'s wrapper of ``do_execute``), so the state an answer reports is forked before the
  answer leaves. Arguments: ``{"cells": {"through": N, "missing": [...]}, "hints": [...]}``.
  Answers ``{"nothing_changed": True}`` when the cell changed nothing, ``{"in_process": why}``
  where fork is unsafe (the host saves in the background then), else ``snapshot_fork.start``'s
- ``save(*, hint_names=None, full=False, background=False, cells=None)`` -> summary (``snapshot_save``);
  with ``background`` the save runs in a forked child (``snapshot_fork``) and the call returns
  at once with ``{"started": True, "pid": ...}`` (or saves in-process, saying why in
  ``in_process``, where fork is unsafe)
- ``save_for_fork()`` -> summary or None: an in-cell commit for a sub-agent's fork
- ``save_status(*, kill=False)`` -> ``{"running": bool, "finished": summary or absent}``: reaps
  a finished save child and adopts its commit (``kill`` first kills one still running)
- ``restore(*, phase="all", skip=())`` -> result (``snapshot_restore``)
- ``pending()`` -> ``{"pending": [names]}``; ``status()`` -> debugging figures
- ``rewind(cell, coverage)``: run as a user cell by the host (``execute {"rewind": N}``): the
  namespace back to its state after answered cell ``cell`` (``snapshot_rewind``); prints what
  changed, raises ``RewindError`` when it cannot. ``states()`` -> ``{"cells": [N, ...]}``: the
  answered cells whose state is kept (``snapshot_states``)
- ``adopt(workspace, label)``: run inside a user cell (``adopt_agent``): a finished
  sub-agent's last state in place of the namespace's saved bindings (``snapshot_adopt``)

Modules of this subpackage (imported under their old ``snapshot_*`` names as aliases, which is
how the code reads): ``fork`` (saving from a forked child), ``pickling`` (one binding <-> bytes),
``blobs`` (content-addressed files), ``manifest`` (the signed index), ``journal`` (crash journal,
poisoned marks), ``names`` (which names, kinds, texts), ``store`` (per-kernel state), ``saving``
and ``reviving`` (the two algorithms), ``kept_states`` (the kept states of answered cells),
``rewinding`` (returning to one) and ``adopting`` (taking another workspace's state). A
submodule is never named like a function of this API (``save``, ``restore``, ...): the function
would hide it. The file format is documented in ``docs/snapshot-format.md``.
"""

import json
import os
import sys

from .. import packages
from . import adopting as snapshot_adopt
from . import fork as snapshot_fork
from . import reviving as snapshot_restore
from . import rewinding as snapshot_rewind
from . import saving as snapshot_save
from . import kept_states as snapshot_states
from . import store as snapshot_store
from .store import Preempted, Store, make_state_dir, read_key

_store = None


def configure(state_dir, key_file, *, max_binding_bytes, max_total_bytes, protected_names=(),
              namespace=None, fork=True, child_limit_s=600, reinstall_packages=True,
              keep_states=snapshot_states.DEFAULT_KEEP_STATES,
              keep_bytes=snapshot_states.DEFAULT_KEEP_BYTES):
    """Set up this kernel's store. Call once, before any other function."""
    global _store
    try:
        shell = _ipython_shell()
        if namespace is None:
            if shell is None:
                return {"ok": False, "error": "not running under IPython: pass namespace="}
            namespace = shell.user_ns
        key = read_key(key_file)
        make_state_dir(state_dir)
        _store = Store(
            state_dir, key, namespace,
            protected_names=list(protected_names),
            max_binding_bytes=int(max_binding_bytes),
            max_total_bytes=int(max_total_bytes),
            shell=shell if shell is not None and namespace is shell.user_ns else None,
        )
        _store.fork_allowed = bool(fork)
        _store.child_limit_s = int(child_limit_s)
        _store.packages = packages.Tracker()
        _store.reinstall_packages = bool(reinstall_packages)
        _store.keep_states = int(keep_states)
        _store.keep_bytes = int(keep_bytes)
        return {"ok": True}
    except Exception as error:  # the API never raises: the host reports the error text
        _store = None
        return {"ok": False, "error": _describe(error)}


def capture(arguments_json):
    """Fork a save of the state this cell leaves, before its reply (see the module docstring)."""
    from ..host import _Json

    return _Json(_capture(arguments_json))


def _capture(arguments_json):
    if _store is None:
        return {"committed": False, "error": "snapshot.configure() has not been called"}
    try:
        arguments = json.loads(arguments_json)
        hints = arguments.get("hints") or []
        snapshot_store.let_go_of_rebound(_store)
        # A cell that installed a package may change no binding: its record still needs a save.
        packages_changed = _store.packages.refresh()
        if not packages_changed and snapshot_fork.unchanged_since_capture(_store, hints):
            _same_state_as_capture(arguments.get("cells"))
            return {"committed": False, "nothing_changed": True}
        return snapshot_fork.start(_store, hint_names=hints, allowed=_store.fork_allowed,
                                   cells=arguments.get("cells"), capture=True)
    except Exception as error:  # the API never raises; the host saves in the background then
        return {"committed": False, "error": _describe(error)}


def _same_state_as_capture(cells):
    """A cell that changed nothing left the state of the last capture's cell: keep that fact
    for a rewind to it (``snapshot_states``). Best effort: it costs that cell's rewind only."""
    cell = snapshot_states.cell_of({"cells": cells})
    if cell is not None and _store.captured_through is not None:
        try:
            snapshot_states.same_as(_store.state_dir, cell, _store.captured_through)
        except OSError:
            pass  # that cell's state is just not offered for a rewind


def rewind(cell, coverage=None):
    """Rewind the namespace to its state right after answered cell ``cell`` (``execute
    {"rewind": N}``: the host runs this as the cell). Prints what changed; raises
    ``snapshot_rewind.RewindError`` (shown as ``error:``/``hint:``) when it cannot."""
    notice = snapshot_rewind.rewind(_store, int(cell), coverage)
    print(notice)


def adopt(workspace, label):
    """Take the last committed state of the workspace directory ``workspace`` (a finished
    sub-agent's) in place of this namespace's saved bindings (``adopt_agent``); prints what
    changed. Raises ``snapshot_rewind.RewindError`` (shown as ``error:``/``hint:``) when it
    cannot."""
    notice = snapshot_adopt.adopt(_store, workspace, label)
    print(notice)


def states():
    """``{"cells": [N, ...]}``: the answered cells whose state a rewind can return to."""
    if _store is None:
        return {"cells": []}
    return {"cells": snapshot_states.available(_store.state_dir)}


def save(*, hint_names=None, full=False, background=False, cells=None):
    """Snapshot the namespace incrementally (see ``snapshot_save``), in a forked child when
    ``background`` (see ``snapshot_fork``). ``cells``: which of the host's cells the state
    holds (``{"through": N, "missing": [...]}``), written into the manifest."""
    if _store is None:
        return {"committed": False, "error": "snapshot.configure() has not been called"}
    try:
        snapshot_store.let_go_of_rebound(_store)
        if background:
            return snapshot_fork.start(_store, hint_names=hint_names, full=full,
                                       allowed=_store.fork_allowed, cells=cells)
        if cells is not None:
            _store.cells = cells
        if _store.child is not None:
            return {"committed": False, "running": True, "pid": _store.child.pid,
                    "error": "a background save is still running; ask save_status() first"}
        return snapshot_save.save(_store, hint_names=hint_names, full=full)
    except Preempted:
        # The host asked (by the preempt file) to give way to a cell; nothing was committed.
        return {"committed": False, "preempted": True}
    except Exception as error:  # the API never raises; the last committed snapshot still stands
        return {"committed": False, "error": _describe(error)}


def save_for_fork():
    """Commit the namespace now, from inside a cell, so a sub-agent forked from the snapshot
    sees this cell's data (``spawn_agent(fork=True)``). A background save still running is
    waited for and adopted first; its summary is kept for the host's next ``save_status``.
    Returns the in-process save's summary, or None when no store is configured (ephemeral)."""
    if _store is None:
        return None
    try:
        collected, earlier = [], _store.unreported
        _store.unreported = []
        try:
            while _store.child is not None:  # and the one waiting behind it, if any
                os.waitid(os.P_PID, _store.child.pid, os.WEXITED | os.WNOWAIT)
                finished = snapshot_fork.status(_store).get("finished")
                if finished:
                    collected.append(finished)
        finally:
            _store.unreported = earlier + collected
        return snapshot_save.save(_store)
    except ChildProcessError:
        return snapshot_save.save(_store)
    except Preempted:
        return {"committed": False, "error": "the save was preempted"}
    except Exception as error:  # the API never raises
        return {"committed": False, "error": _describe(error)}


def save_status(*, kill=False):
    """Whether a background save is running; reaps a finished one and adopts its commit."""
    if _store is None:
        return {"running": False}
    try:
        return snapshot_fork.status(_store, kill=kill)
    except Exception as error:  # the API never raises
        return {"running": False, "finished": {"committed": False, "error": _describe(error)}}


def restore(*, phase="all", skip=()):
    """Revive the snapshot (see ``snapshot_restore``)."""
    if _store is None:
        return {"status": "error", "reason": "snapshot.configure() has not been called"}
    try:
        return snapshot_restore.restore(_store, phase=phase, skip=list(skip))
    except Exception as error:  # the API never raises: report it as an internal error
        return {"status": "error", "reason": _describe(error)}


def pending():
    """Names still waiting to be revived."""
    return {"pending": snapshot_restore.pending(_store) if _store is not None else []}


def status():
    """Figures for debugging: configuration, last save, what the store holds."""
    if _store is None:
        return {"configured": False}
    try:
        return _status(_store)
    except Exception as error:  # the API never raises
        return {"configured": True, "error": _describe(error)}


def _status(store):
    committed = store.committed or {}
    revive = store.revive
    return {
        "configured": True,
        "state_dir": store.state_dir,
        "max_binding_bytes": store.max_binding_bytes,
        "max_total_bytes": store.max_total_bytes,
        "under_ipython": store.shell is not None,
        "generation": committed.get("generation"),
        "saved_at": committed.get("saved_at"),
        "bindings": len(committed.get("bindings", {})),
        "stored_bytes": committed.get("stored_bytes"),
        "tracked": len(store.tracked),
        "expensive": sorted(name for name, tracked in store.tracked.items()
                            if tracked.cost > snapshot_save.EXPENSIVE_SECONDS),
        "pending": sorted(store.pending),
        "held": sorted(store.held),
        "revive_status": revive.status if revive else None,
        "poisoned": dict(revive.poisoned) if revive else {},
        "name_error_hook": store.hook_installed,
        "last_save": store.last_save,
        "save_child": store.child.pid if store.child is not None else None,
        "fork": snapshot_fork.fork_unsafe_reason(store.fork_allowed) or "allowed",
    }


def _ipython_shell():
    """The running IPython shell, without importing IPython in plain Python."""
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return None
    try:
        return ipython.get_ipython()
    except Exception:  # a broken IPython install: behave as plain Python
        return None


def _describe(error):
    return f"{type(error).__name__}: {error}"
