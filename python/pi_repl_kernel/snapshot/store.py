"""The state one kernel's snapshot store keeps between calls.

Owns: the configuration (paths, key, caps, namespace, protected names), the blob directory,
journal and poisoned marks of the session, and what the store remembers in memory: the last
committed manifest, the bindings it saved or revived (``Tracked``), the snapshot entries not (yet)
in the namespace (``held``: pending, poisoned, skipped or failed), and the revive state. Does not
own the algorithms: ``snapshot_save`` and ``snapshot_restore`` act on a ``Store``.

Invariants:

- ``committed`` is exactly the manifest on disk that this process last wrote or verified; it is
  updated only after a commit succeeded (a preempted save leaves it untouched).
- ``tracked[name]`` describes the stored value of ``name`` in ``committed``: so an object is
  considered saved only once a manifest naming its blobs is durable.
- ``held`` entries are carried into every new manifest until the user binds that name again, so
  a value that is pending, or that failed or was skipped while reviving, is never lost by a save.
"""

import os
import weakref

from . import blobs as snapshot_blobs
from . import journal as snapshot_journal
from . import manifest as snapshot_manifest
from . import kept_states as snapshot_states

STATE_DIR_MODE = 0o700


class Tracked:
    """What the store knows about a binding whose value is in the committed manifest.

    ``cost`` is the seconds its last fingerprint pass took (estimated for a revived binding);
    ``ref_targets`` holds the identities of the bindings its stream refers to. ``known_chunks``:
    for a value stored in item chunks, the ``snapshot_items.Known`` chunk records (the items, by
    strong reference, and their blobs), which a save compares with instead of pickling; never
    changed once made (a save child compares with the records of the fork).
    """

    __slots__ = ("_identity", "entry", "fingerprint", "cost", "ref_targets", "known_chunks")

    def __init__(self, value, entry, cost, ref_targets, known_chunks=()):
        self._identity = identity_ref(value)
        self.entry = entry
        self.fingerprint = fingerprint_of(entry)
        self.cost = cost
        self.ref_targets = ref_targets
        self.known_chunks = known_chunks

    def holds(self, value):
        return self._identity() is value

    def let_go_unless(self, value):
        """Stops holding the stored object when ``value`` (what its name is bound to now) is
        not it. Only a strong reference is dropped (a type without weak references); the binding
        then reads as changed, which it is, so the next save stores it again."""
        if not isinstance(self._identity, weakref.ref) and self._identity() is not value:
            self._identity = _rebound

    def refs_unchanged(self, canonical):
        """True if every binding this one refers to is still bound to the same object."""
        return all(name in canonical and canonical[name] is target()
                   for name, target in self.ref_targets.items())


REBOUND = object()
"""Stands for an object its name no longer holds: what a save child's fork-time namespace keeps
in its place once the parent's name is rebound (``let_go_of_rebound``). Never any value."""


def _rebound():
    return REBOUND


def let_go_of_rebound(store):
    """Drops the parent's references to objects whose names were rebound or deleted since they
    were saved or since a save child forked, so a rebuilt value is not held twice until a save
    commits and is adopted (a rebuilt 8 GB bytearray held 16 GB, and a live fork was refused for
    memory meanwhile). Only an identity is dropped: the binding reads as changed, which it is,
    and the next save stores it again. Called before each capture and save, and after a child's
    commit is adopted."""
    missing = object()
    now = store.namespace
    for name, record in list(store.tracked.items()):
        record.let_go_unless(now.get(name, missing))
    for child in (getattr(store, "child", None), getattr(store, "waiting", None)):
        if child is None:
            continue
        at_fork = child.namespace
        for name, value in list(at_fork.items()):
            if value is not REBOUND and now.get(name, missing) is not value:
                at_fork[name] = REBOUND


def identity_ref(value):
    """A callable returning ``value`` while it lives: a weak reference when the type allows one.

    Otherwise a strong reference: an object whose id could otherwise be reused by a new object
    must stay alive to be compared by identity. It is released once the name is seen rebound
    (``let_go_of_rebound``, before each capture and save).
    """
    try:
        return weakref.ref(value)
    except TypeError:
        return lambda: value


def fingerprint_of(entry):
    """The fingerprint of a stored binding: the id of its stream and, per buffer, the ids of its
    chunks (one id for a buffer stored whole)."""
    return (entry["stream"]["id"],
            tuple(tuple(blob["id"] for blob in snapshot_manifest.buffer_blobs(buffer))
                  for buffer in entry["buffers"]))


PREEMPT_NAME = "preempt"
"""A file the host creates to ask a save or a background revive to stop at the next binding."""


def preempt_requested(store):
    """True when the host has asked the current save or revive to give way to a cell."""
    return store.preempt_path is not None and os.path.exists(store.preempt_path)


class Preempted(KeyboardInterrupt):
    """Raised at a safe point when the host asked to stop (cooperatively, by ``preempt``)."""


class Store:
    """One session's snapshot store, as configured for this kernel."""

    def __init__(self, state_dir, key, namespace, *, protected_names, max_binding_bytes,
                 max_total_bytes, shell=None):
        self.state_dir = state_dir
        self.preempt_path = os.path.join(state_dir, PREEMPT_NAME)
        self.key = key
        self.namespace = namespace
        self.protected = frozenset(protected_names)
        self.max_binding_bytes = max_binding_bytes
        self.max_total_bytes = max_total_bytes
        self.shell = shell
        """The IPython shell whose ``user_ns`` is ``namespace``, or None in plain Python."""
        self.blobs = snapshot_blobs.BlobStore(os.path.join(state_dir, "blobs"))
        self.journal = snapshot_journal.Journal(state_dir)
        self.marks = snapshot_journal.PoisonMarks(state_dir)
        self.tracked = {}
        self.held = {}
        self.pending = set()
        self.committed = None
        self.committed_files = set()
        self.orphans = set()
        """Blob files written by saves that did not commit; collected at the next commit."""
        self.revive = None
        """The ``snapshot_restore.ReviveState`` once ``restore`` has run in this process."""
        self.swept = False
        self.hook_installed = False
        self.last_save = None
        self.fork_allowed = True
        """Whether a background save may fork (``snapshot_fork``); False saves in-process."""
        self.child = None
        """The running ``snapshot_fork.Child``, if a background save is under way."""
        self.waiting = None
        """A ``snapshot_fork.Child`` forked while ``child`` ran (a capture at a later answer): it
        waits for the save lock, then saves its own, newer image. At most one waits; a newer
        capture replaces it."""
        self.dying = []
        """Replaced waiting children, SIGKILLed and not yet reaped: ``(pid, report path)``.
        Reaped without blocking (``snapshot_fork.reap_dying``)."""
        self.leftovers = []
        """Pids of replaced children whose temp files the next forked child removes once it holds
        the save lock (``snapshot_fork.Child.leftovers_of``)."""
        # Set in a save child only: its token, written into the manifest it commits.
        self.save_token = None
        self.cells = None
        """Set in a save child only: which of the host's cells its image holds
        (``{"through": N, "missing": [...]}``), written into the manifest it commits."""
        self.child_limit_s = 600
        """How long a save child may live (it ends itself past this: ``signal.alarm``)."""
        self.captured = None
        """The namespace's bindings (name -> object) at the last capture that forked, to tell a
        cell that changed nothing (``snapshot_fork.unchanged_since_capture``)."""
        self.confirmed_chunks = {}
        """Set by the last commit: per binding saved in item chunks, which chunks matched the
        known ones (``snapshot_items``); a save child reports it to the kernel."""
        self.keep_states = snapshot_states.DEFAULT_KEEP_STATES
        self.keep_bytes = snapshot_states.DEFAULT_KEEP_BYTES
        """The window of answered cells' states kept for a rewind (``snapshot_states``)."""
        self.state_error = None
        """Why the last commit's state could not be kept for a rewind, if it could not."""
        self.captured_through = None
        """The answered cell of the last capture that forked: a later cell that changed nothing
        left that cell's state."""
        self.unreported = []
        """The summaries of save children collected inside a cell (``snapshot.save_for_fork``),
        oldest first, until the host's ``save_status`` calls ask for them."""

    @property
    def frozen_image(self):
        """True only in a save child (``snapshot_fork`` sets ``save_token`` there and nowhere
        else): its memory is a copy-on-write image with one thread, which nothing changes while
        it saves. A save then writes buffers straight from memory and releases its pages once
        written (``snapshot_save.write_blobs``); in the kernel itself that would zero the user's
        data, so anything that sets ``save_token`` outside a forked child must not."""
        return self.save_token is not None

    @property
    def manifest_path(self):
        return os.path.join(self.state_dir, snapshot_manifest.MANIFEST_NAME)

    def hidden_names(self):
        """IPython's ``user_ns_hidden`` (names it bound itself), or an empty dict."""
        hidden = getattr(self.shell, "user_ns_hidden", None)
        return hidden if isinstance(hidden, dict) else {}

    def adopt_committed(self, body):
        """Record ``body`` as the manifest on disk (after verifying or writing it)."""
        self.committed = body
        self.committed_files = snapshot_manifest.blob_files(body)


def make_state_dir(state_dir):
    """Create ``state_dir`` 0700 if missing (its parent must exist)."""
    try:
        os.mkdir(state_dir, STATE_DIR_MODE)
    except FileExistsError:
        if not os.path.isdir(state_dir):
            raise NotADirectoryError(f"{state_dir} exists and is not a directory") from None


def read_key(key_file):
    """Read this installation's secret key: hex text, at least 16 bytes."""
    with open(key_file, encoding="ascii") as file:
        text = file.read().strip()
    try:
        key = bytes.fromhex(text)
    except ValueError:
        raise ValueError(f"the key file {key_file} does not hold hex text") from None
    if len(key) < 16:
        raise ValueError(f"the key in {key_file} is too short ({len(key)} bytes; need 16 or more)")
    return key
