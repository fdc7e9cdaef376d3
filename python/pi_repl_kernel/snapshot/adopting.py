"""Adopt: take a finished sub-agent's workspace as this one's (``adopt_agent(handle)``).

Owns: putting the last committed state of another workspace of this installation (a
sub-agent's, ``<session>/agents/<id>/snapshot``) in place of this namespace's saved bindings,
inside the cell that asked, and the words of what changed. Does not own: reviving a binding
(``snapshot_restore``), the steps shared with a rewind (``snapshot_rewind``: every save child
collected, the present saved first, the saved bindings cleared), or committing the adopted state
(the cell's capture does, as after any cell).

Invariants:

- Nothing answered is lost: the state before the adoption is saved first (and kept for a rewind
  to the cell before), as a rewind does.
- The other workspace's manifest is checked like this one's (this installation's key, format,
  schema) and each blob against its id before it is unpickled; a refused one changes nothing.
- Its blobs are hard-linked into this store (copied where a link is refused), never moved: the
  other workspace stays as it was.
- Files, processes and anything outside the namespace are not adopted; the result says so.
"""

import contextlib
import fcntl
import os
import shutil
import time

from . import blobs as snapshot_blobs
from . import fork as snapshot_fork
from . import manifest as snapshot_manifest
from . import reviving as snapshot_restore
from . import rewinding as snapshot_rewind
from .rewinding import RewindError


def adopt(store, workspace, label):
    """Replace ``store``'s saved bindings with the last committed state of the workspace
    directory ``workspace`` (``label`` names whose it is); return the notice. Waits (at most
    ``SETTLE_SECONDS``) for the process that held it to let go and for its last save to
    commit. Raises ``RewindError`` (shown as ``error:``/``hint:``) and changes nothing when it
    cannot."""
    if store is None:
        raise RewindError("this workspace is not durable: it has no snapshot store to take "
                          f"{label}'s workspace into",
                          "start a durable session (`pi-repl mcp --session NAME`)")
    if store.revive is not None and store.revive.kept_in_place:
        raise RewindError(f"this workspace's snapshot was refused, so nothing can replace it: "
                          f"{store.revive.reason}", "see `pi-repl sessions show`")
    snapshot_dir = os.path.join(workspace, "snapshot")
    with _settled(os.path.join(workspace, "lock"), label), \
            _settled(os.path.join(snapshot_dir, snapshot_fork.LOCK_NAME), label):
        return _adopt_settled(store, snapshot_dir, label)


def _adopt_settled(store, snapshot_dir, label):
    path = os.path.join(snapshot_dir, snapshot_manifest.MANIFEST_NAME)
    if not os.path.exists(path):
        raise RewindError(f"{label} left no saved workspace ({path} is missing)",
                          "a sub-agent's workspace is saved when it ends; wait for it first")
    try:
        target = snapshot_manifest.read_file(path, store.key)
    except snapshot_manifest.Refused as refused:
        raise RewindError(f"{label}'s workspace cannot be used: {refused}",
                          "its snapshot is kept as it is; nothing here changed") from None
    snapshot_rewind.collect_save_children(store)
    snapshot_rewind.keep_the_present(store, None)
    link_blobs(os.path.join(snapshot_dir, "blobs"), store.blobs.root)
    before = snapshot_rewind.present(store)
    snapshot_rewind.clear(store)
    result = snapshot_restore.revive_state(store, target)
    store.captured = None  # the next capture must save this state
    heading = (f"Took {label}'s workspace as this one's (its state saved "
               f"{target.get('saved_at', '?')}).")
    footer = ("Files, processes and anything outside the Python namespace were not taken over. "
              "The state before is kept: rewind to the cell before this one to return to it.")
    return snapshot_rewind.changes_notice(heading, f"not in {label}'s workspace", before,
                                          target, result, footer)


SETTLE_SECONDS = 60
"""How long an adoption waits for the other workspace's process and its last save to end."""


@contextlib.contextmanager
def _settled(lock_path, label):
    """Hold a shared lock on ``lock_path`` once nobody holds it exclusively (the workspace's
    process, a save committing); a missing file is nobody's."""
    try:
        fd = os.open(lock_path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        yield
        return
    try:
        deadline = time.monotonic() + SETTLE_SECONDS
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise RewindError(
                        f"{label}'s workspace is still in use after {SETTLE_SECONDS} s "
                        f"({lock_path} is locked)",
                        "its process is still saving or running; try again once it ended"
                    ) from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)


def link_blobs(source_root, target_root):
    """Hard-link every blob of ``source_root`` that ``target_root`` lacks (a copy where the link
    is refused, e.g. another file system); temp files are skipped. Returns how many were added."""
    added = 0
    try:
        directories = [entry for entry in os.scandir(source_root) if entry.is_dir()]
    except FileNotFoundError:
        return 0
    for directory in directories:
        into = os.path.join(target_root, directory.name)
        os.makedirs(into, mode=0o700, exist_ok=True)
        for entry in os.scandir(directory.path):
            if entry.name.startswith((".", snapshot_blobs.TEMP_PREFIX)) or not entry.is_file():
                continue
            target = os.path.join(into, entry.name)
            if os.path.exists(target):
                continue  # content-addressed: the same name holds the same bytes
            try:
                os.link(entry.path, target)
            except OSError:
                temp = os.path.join(
                    into, f"{snapshot_blobs.TEMP_PREFIX}adopt-{os.getpid()}-{entry.name}")
                shutil.copyfile(entry.path, temp)
                os.replace(temp, target)
            added += 1
    return added
