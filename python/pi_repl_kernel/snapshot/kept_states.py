"""The states of answered cells a rewind can return to: one kept manifest per answered cell.

Owns: the ``states/`` directory of a state directory, which manifests are kept there and which
are let go (the window), and which blobs they hold from the sweep. Does not own: writing the
current manifest (``snapshot_manifest``), or reviving a kept one (``snapshot_rewind``).

Layout (``docs/rewind.md``, ``docs/snapshot-format.md``)::

    states/<N>.json    a byte copy of the signed manifest committed for the state right after
                       answered cell N (its ``cells.through``)
    states/<N>.same    the text of a number M: cell N changed nothing, its state is M's

Invariants:

- A kept manifest is a copy of one that was (or is about to be) committed, signed as it was: a
  rewind checks it exactly like ``manifest.json``. It is written *before* the manifest's rename,
  so every committed state with a cell number is kept, until the window lets it go.
- Every blob a kept manifest names stays on disk: ``kept_files`` is what a commit's removal and
  the sweep spare. A manifest is let go (its file removed) before its blobs can be collected.
- The window: the newest states first, at most ``keep_states`` of them, and no more than
  ``keep_bytes`` of blobs held by them and by no newer kept state nor the current manifest; the
  first state that does not fit ends the window (older ones go too), so what is kept is always
  the last states in a row. The current manifest's own blobs are never counted.
"""

import json
import os

from . import blobs as snapshot_blobs
from . import manifest as snapshot_manifest

STATES_DIR = "states"
MANIFEST_SUFFIX = ".json"
SAME_SUFFIX = ".same"

DEFAULT_KEEP_STATES = 100
"""How many answered cells' states are kept at most (the newest)."""
DEFAULT_KEEP_BYTES = 8 << 30
"""Bytes of blobs the kept states may hold beyond the current manifest's (the host passes its
``--rewind-max-mb``)."""

_TEMP_PREFIX = snapshot_blobs.TEMP_PREFIX


def states_dir(state_dir):
    return os.path.join(state_dir, STATES_DIR)


def cell_of(body):
    """The answered cell a manifest body's state follows (``cells.through``), or None."""
    cells = body.get("cells") if isinstance(body, dict) else None
    through = cells.get("through") if isinstance(cells, dict) else None
    return through if type(through) is int and through > 0 else None


def keep(state_dir, cell, data):
    """Keep ``data`` (a signed manifest's bytes) as the state after ``cell``; atomic, durable."""
    directory = _ensure_dir(state_dir)
    snapshot_blobs.write_then_rename(
        data, os.path.join(directory, f"{cell}{MANIFEST_SUFFIX}"),
        f".{cell}{MANIFEST_SUFFIX}{_TEMP_PREFIX}")
    _remove_quietly(os.path.join(directory, f"{cell}{SAME_SUFFIX}"))
    snapshot_blobs.fsync_dir(directory)


def same_as(state_dir, cell, earlier):
    """Note that answered cell ``cell`` left the state of cell ``earlier`` (it changed nothing).

    Written at the answer of every such cell, so not synced: a machine crash can cost this
    note (that cell is then not offered for a rewind, or reads as unknown), nothing else."""
    if cell == earlier:
        return
    directory = _ensure_dir(state_dir)
    if os.path.exists(os.path.join(directory, f"{cell}{MANIFEST_SUFFIX}")):
        return
    snapshot_blobs.write_then_rename(
        str(earlier).encode("ascii"), os.path.join(directory, f"{cell}{SAME_SUFFIX}"),
        f".{cell}{SAME_SUFFIX}{_TEMP_PREFIX}", sync=False)


def resolve(state_dir, cell):
    """The path of the kept manifest holding the state after ``cell``, or None."""
    directory = states_dir(state_dir)
    seen = set()
    while cell not in seen:
        seen.add(cell)
        path = os.path.join(directory, f"{cell}{MANIFEST_SUFFIX}")
        if os.path.exists(path):
            return path
        try:
            with open(os.path.join(directory, f"{cell}{SAME_SUFFIX}"), encoding="ascii") as file:
                cell = int(file.read().strip())
        except (OSError, ValueError):
            return None
    return None


def available(state_dir):
    """The answered cells whose state is kept, ascending."""
    manifests, same = _listing(state_dir)
    cells = set(manifests)
    cells.update(cell for cell in same if resolve(state_dir, cell) is not None)
    return sorted(cells)


def enforce_window(state_dir, current_files, keep_states=DEFAULT_KEEP_STATES,
                   keep_bytes=DEFAULT_KEEP_BYTES):
    """Let go of the kept states beyond the window; return ``(kept, released)``: the blob files
    the kept ones name (``current_files`` included), which nothing may collect, and those only
    the states let go named, for the caller to remove."""
    manifests, same = _listing(state_dir)
    kept_files = set(current_files)
    extra_bytes = 0
    kept = set()
    for cell in sorted(manifests, reverse=True):
        body = _read_unverified(manifests[cell])
        if body is None:
            continue  # unreadable: it cannot be rewound to, and it holds nothing
        files = _blob_sizes(body)
        added = {name: size for name, size in files.items() if name not in kept_files}
        grown = extra_bytes + sum(added.values())
        if len(kept) >= keep_states or grown > keep_bytes:
            break
        kept.add(cell)
        kept_files.update(files)
        extra_bytes = grown
    released = set()
    for cell, path in manifests.items():
        if cell not in kept:
            body = _read_unverified(path)
            if body is not None:
                released.update(_blob_sizes(body))
            _remove_quietly(path)
    oldest = min(kept, default=None)
    for cell, path in same.items():
        # One newer than the oldest kept state stays even if its state is not kept yet: a save
        # child may still be committing it.
        if oldest is None or cell < oldest:
            _remove_quietly(path)
    return kept_files, released - kept_files


def kept_files(state_dir, current_files):
    """The blob files of every kept state and of ``current_files`` (no state is let go)."""
    files = set(current_files)
    for path in _listing(state_dir)[0].values():
        body = _read_unverified(path)
        if body is not None:
            files.update(_blob_sizes(body))
    return files


def remove_old_temps(state_dir, older_than_s, now):
    """Delete temp files in ``states/`` a writer left (killed mid-write)."""
    for entry in _scandir(states_dir(state_dir)):
        if _TEMP_PREFIX in entry.name:
            try:
                if now - entry.stat().st_mtime >= older_than_s:
                    os.unlink(entry.path)
            except OSError:
                continue


def _listing(state_dir):
    manifests, same = {}, {}
    for entry in _scandir(states_dir(state_dir)):
        name = entry.name
        for suffix, into in ((MANIFEST_SUFFIX, manifests), (SAME_SUFFIX, same)):
            stem = name[: -len(suffix)]
            if name.endswith(suffix) and stem.isdigit():
                into[int(stem)] = entry.path
    return manifests, same


def _read_unverified(path):
    """A kept manifest's body for its blob list only (a rewind verifies it before use)."""
    try:
        with open(path, "rb") as file:
            body = json.loads(file.read().decode("utf-8"))
        return body if isinstance(body, dict) and isinstance(body.get("bindings"), dict) else None
    except (OSError, ValueError):
        return None


def _blob_sizes(body):
    sizes = {}
    for entry in body["bindings"].values():
        if not isinstance(entry, dict) or entry.get("kind") == "alias":
            continue
        try:
            for blob in snapshot_manifest.entry_blobs(entry):
                sizes[snapshot_blobs.filename(blob)] = int(blob.get("stored", 0))
        except (KeyError, TypeError, ValueError):
            continue
    return sizes


def _ensure_dir(state_dir):
    directory = states_dir(state_dir)
    try:
        os.mkdir(directory, 0o700)
        snapshot_blobs.fsync_dir(state_dir)
    except FileExistsError:
        pass
    return directory


def _scandir(directory):
    try:
        with os.scandir(directory) as entries:
            return list(entries)
    except OSError:
        return []


def _remove_quietly(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
