"""Rewind: the workspace back to its state right after an earlier answered cell.

Owns: the rewind of a durable session's namespace to a kept state (``snapshot_states``), in the
kernel process, inside the cell that asked for it (``execute {"rewind": N}``), and the words of
what changed. Does not own: which states are kept (``snapshot_states``), reviving one binding
(``snapshot_restore``), or committing the rewound state (the cell's capture does, as after any
cell: the rewind is an answered cell of its own, numbered, and its state is kept like any other).

Invariants:

- Nothing answered is lost: before the namespace is touched, every save child has ended and
  been adopted, and the state as it is now is saved (a no-op when the last capture holds it), so
  the state after the last answered cell is kept and can be rewound to in turn.
- The kept manifest is checked exactly like ``manifest.json`` (signature, format, schema) and each
  blob against its id before it is unpickled; a refused one changes nothing.
- The namespace's saved bindings (every name a snapshot would hold) are removed, then the kept
  state's are revived, all of them now (large buffers memory-mapped); names the tool or IPython
  bound are left alone. A binding that fails to revive is named, and carried into the next
  manifest as the revive of a restart would carry it.
- Files, processes, threads and anything outside the namespace are not rewound; the result says
  so.
"""

import os

from . import fork as snapshot_fork
from . import manifest as snapshot_manifest
from . import names as snapshot_namespace
from . import reviving as snapshot_restore
from . import saving as snapshot_save
from . import kept_states as snapshot_states
from .store import fingerprint_of


class RewindError(Exception):
    """A rewind that could not happen; nothing was changed. Shown without a traceback."""

    def __init__(self, message, hint):
        super().__init__(message)
        self.hint = hint

    def _render_traceback_(self):  # IPython shows these lines instead of a traceback
        return [f"error: {self}", f"hint: {self.hint}"]


def rewind(store, cell, coverage):
    """Rewind ``store``'s namespace to the state after answered cell ``cell``; return the notice.

    ``coverage``: which answered cells the state holds now (``{"through", "missing"}``, from the
    host), written into the manifest the state before the rewind is saved in."""
    if store is None:
        raise RewindError("this workspace is not durable: it keeps no states to rewind to",
                          "start a durable session (`pi-repl mcp --session NAME`)")
    if store.revive is not None and store.revive.kept_in_place:
        raise RewindError(f"the snapshot was refused, so nothing can be rewound: "
                          f"{store.revive.reason}", "see `pi-repl sessions show`")
    collect_save_children(store)  # their commits are states too (and the hint lists them)
    path = snapshot_states.resolve(store.state_dir, cell)
    if path is None:
        raise RewindError(f"the state after cell {cell} is not kept", _available_hint(store))
    try:
        target = snapshot_manifest.read_file(path, store.key)
    except snapshot_manifest.Refused as refused:
        raise RewindError(f"the kept state after cell {cell} cannot be used: {refused}",
                          _available_hint(store)) from None
    keep_the_present(store, coverage)
    before = present(store)
    clear(store)
    result = snapshot_restore.revive_state(store, target)
    store.captured = None  # the next capture must save this state
    heading = (f"Rewound the workspace to its state right after cell {cell} "
               f"(saved {target.get('saved_at', '?')}).")
    footer = ("Files, processes and anything outside the Python namespace were not rewound. "
              "The state before this rewind is kept: rewind to the cell before this one to "
              "return to it.")
    return changes_notice(heading, f"bound after cell {cell}", before, target, result, footer)


def collect_save_children(store):
    """Wait for every save child (and the one waiting behind it) and adopt its commit."""
    # ``status`` hands out summaries kept for the host first: set them apart while reaping.
    collected, earlier = [], store.unreported
    store.unreported = []
    try:
        while store.child is not None:  # and the one waiting behind it, if any
            try:
                os.waitid(os.P_PID, store.child.pid, os.WEXITED | os.WNOWAIT)
            except ChildProcessError:
                pass  # reaped by someone else: ``status`` reads its report
            finished = snapshot_fork.status(store).get("finished")
            if finished:
                collected.append(finished)
    finally:
        store.unreported = earlier + collected  # the host's next save_status calls get them


def keep_the_present(store, coverage):
    """Save what the namespace holds now (with the host's coverage), once every save child
    has ended: the state before the rewind stays reachable."""
    previous = store.cells
    if coverage is not None:
        store.cells = coverage
    try:
        summary = snapshot_save.save(store)
    finally:
        store.cells = previous  # later saves are told their own coverage
    if not summary.get("committed"):
        raise RewindError(
            f"the workspace as it is now could not be saved, so a rewind would lose it: "
            f"{summary.get('error', 'not committed')}",
            "run a cell to save it again, or see `pi-repl sessions show`")


def present(store):
    """name -> fingerprint (None when it is not in the snapshot) of every binding now."""
    scan = snapshot_namespace.scan(store.namespace, store.hidden_names(), store.protected)
    committed = (store.committed or {}).get("bindings", {})
    present = {}
    for name in list(scan.canonical) + list(scan.aliases) + list(scan.invalid) + \
            list(store.held):
        entry = committed.get(name)
        present[name] = _identity(entry, committed)
    return present


def _identity(entry, bindings):
    if entry is None:
        return None
    if entry["kind"] == "alias":
        return ("alias", entry["alias"], _identity(bindings.get(entry["alias"]), bindings))
    return fingerprint_of(entry)


def clear(store):
    """Remove every binding a snapshot would hold, and forget what the store held for them."""
    scan = snapshot_namespace.scan(store.namespace, store.hidden_names(), store.protected)
    for name in list(scan.canonical) + list(scan.aliases) + list(scan.invalid):
        store.namespace.pop(name, None)
    store.tracked, store.held, store.pending = {}, {}, set()


def changes_notice(heading, removed_why, before, target, result, footer):
    """What a state taken in place of the present changed (a rewind's, an adoption's), as lines
    after ``heading``: restored, removed (``removed_why``), unchanged, not revived, not saved."""
    bindings = target["bindings"]
    removed = sorted(name for name in before if name not in bindings)
    restored = sorted(name for name in bindings
                      if before.get(name, ...) != _identity(bindings[name], bindings))
    failed = result.get("failed", {})
    lines = [heading]
    if restored:
        lines.append(f"Restored as they were then: {', '.join(restored)}.")
    if removed:
        lines.append(f"Removed ({removed_why}): {', '.join(removed)}.")
    unchanged = len(bindings) - len(restored)
    if unchanged:
        lines.append(f"Unchanged: {unchanged} binding(s).")
    if not restored and not removed:
        lines.append("Nothing changed: the workspace already held that state.")
    for name, reason in sorted(failed.items()):
        lines.append(f"Not revived: {name} ({reason}).")
    for name, reason in sorted(target.get("unsaved", {}).items()):
        lines.append(f"Not in that state (it was not saved then): {name} ({reason}).")
    lines.append(footer)
    return "\n".join(lines)


def _available_hint(store):
    cells = snapshot_states.available(store.state_dir)
    if not cells:
        return "no states are kept yet; each answered cell's state is kept once it is saved"
    after = "after cell" if len(cells) == 1 else "after cells"
    return f"states kept: {after} {_ranges(cells)} (`pi-repl sessions show` lists them)"


def _ranges(cells):
    """``[1, 2, 3, 5]`` -> ``"1-3, 5"``."""
    parts, start, previous = [], None, None
    for cell in cells:
        if start is None:
            start = previous = cell
        elif cell == previous + 1:
            previous = cell
        else:
            parts.append(f"{start}-{previous}" if previous > start else str(start))
            start = previous = cell
    if start is not None:
        parts.append(f"{start}-{previous}" if previous > start else str(start))
    return ", ".join(parts)
