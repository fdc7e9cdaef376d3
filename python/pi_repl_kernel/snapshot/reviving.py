"""Reviving a snapshot into the namespace: verified, journalled, eager where cheap, lazy otherwise.

Owns: the revive plan (what is pending, poisoned, skipped), the order of loading, blob
verification before unpickling (streams and memory-mapped buffers alike), the journal around each
unpickle, and the IPython ``NameError`` hook for names still pending. Does not own:
the manifest checks (``snapshot_manifest``) or unpickling (``snapshot_pickle``).

Invariants:

- A refused snapshot is never replaced. One signed with another key, or written by a newer
  pi-repl, stays where it is (``kept_in_place``), and ``snapshot_save`` refuses to save over it:
  the start that can read it finds it. A damaged one (or blobs without their manifest) is set
  aside as ``<state dir>.refused-<time>``, and the workspace starts a new snapshot.
- Nothing is unpickled unless the manifest passed every check (``refused`` otherwise) and every
  blob of the binding (stream and raw buffers) is present and hashes to its id. Buffers are
  hashed through their mapping *before* the unpickle, while nobody else holds it: verification
  never reads memory the user may have changed, and a value revived from a damaged blob is never
  handed over (so never re-signed by a later save). A value in chunks of items
  (``snapshot_items``) is read a chunk at a time, each chunk verified just before it is
  unpickled; one bad chunk fails the whole binding. Its revived items become the store's known
  chunks, so the next save pickles none of them.
- A binding already bound in the namespace is never replaced (``superseded``): a restore cannot
  overwrite what the user (or the tool) bound since.
- ``phase="eager"`` loads bindings whose pickle stream is at most ``EAGER_STREAM_BYTES`` and
  whose raw buffers fit in what is left of ``EAGER_BUFFER_BYTES`` (the phase's budget of bytes
  to hash), and what they refer to. Everything else stays pending for ``rest``: a large value,
  in-band or out-of-band, never makes a resume slower. Raw buffer blobs are memory-mapped
  copy-on-write (writable, paged in on demand); a binding changed in place after the revive is
  simply changed.
- A binding whose unpickle raised is reported ``failed`` and kept in the snapshot (it may load in
  another environment); one that the evidence says killed the kernel is reported ``poisoned``
  and skipped until saved anew (``snapshot_journal`` says what counts as evidence: a host kill
  alone does not). A ``KeyboardInterrupt`` while unpickling leaves that binding pending and is
  re-raised.
"""

import datetime
import os

from .. import packages
from . import blobs as snapshot_blobs
from . import items as snapshot_items
from . import journal as snapshot_journal
from . import manifest as snapshot_manifest
from . import names as snapshot_namespace
from . import pickling as snapshot_pickle
from .store import Tracked, identity_ref, preempt_requested

EAGER_STREAM_BYTES = 1 << 20
"""A binding whose pickle stream is at most this large may be revived in the eager phase."""

EAGER_BUFFER_BYTES = 64 << 20
"""Raw buffer bytes the eager phase hashes in all; bindings beyond this budget stay pending.
Hashing a mapped buffer pages it in; measured for a 64 MB array: 3 ms with the file in the page
cache, 30 ms after dropping the caches. This bounds what verification adds to a resume."""

PHASES = ("eager", "rest", "all")

ASSUMED_PAGE_IN_BYTES_PER_SECOND = 1e9
"""Used to estimate the fingerprint cost of a revived binding from its size (see ``_estimate``)."""

_KIND_ORDER = {"module": 0, "class": 1, "function": 2, "value": 3, "alias": 4}


class ReviveState:
    """The revive of this process: the verified manifest and what became of each binding."""

    def __init__(self, status, reason="", body=None, kept_in_place=False):
        self.status = status
        self.reason = reason
        self.body = body
        self.kept_in_place = kept_in_place
        """A refused snapshot left where it is: nothing may be saved over it."""
        self.refused_kind = None
        """For ``refused``: ``snapshot_manifest``'s kind of refusal."""
        self.poisoned = {}
        self.skipped = set()
        self.objects = {}
        """name -> revived object (what references between bindings resolve to)."""
        self.visiting = set()
        self.superseded = []
        """Names already bound when the revive was planned (reported by the first call)."""
        self.packages = None
        """What ``packages.ensure`` did before the first binding (reported by the first call)."""

    @property
    def bindings(self):
        return self.body["bindings"] if self.body else {}


class _Call:
    """What one ``restore`` call did."""

    def __init__(self):
        self.revived = []
        self.failed = {}
        self.visiting = set()
        self.superseded = []


def restore(store, phase="all", skip=()):
    """Revive the snapshot of ``store`` into its namespace; return the result dict of the API."""
    if phase not in PHASES:
        return {"status": "error", "reason": f"unknown phase {phase!r} (use one of {PHASES})"}
    _judge_unfinished(store, first_call=store.revive is None)
    planned_now = store.revive is None
    state = store.revive or _plan(store, set(skip))
    call = _Call()
    if planned_now:
        call.superseded.extend(state.superseded)
        if state.status == "ok":
            # Before any binding is unpickled: its class may come from a package the session
            # installed, which this environment may lack (a rebuilt venv, another machine).
            state.packages = _ensure_packages(store, state.body)
    if state.status == "ok":
        _skip(store, state, set(skip))
        for name in _load_order(state, _names_for(store, state, phase)):
            if phase == "rest" and preempt_requested(store):
                break  # the host wants the kernel for a cell; the rest stays pending
            _revive(store, state, name, call=call)
        store.journal.sync()
        update_name_error_hook(store)
    return _result(store, state, call)


def pending(store):
    return sorted(store.pending)


def revive_state(store, body):
    """Revive ``body``, a kept state's verified manifest (``snapshot_rewind``), all of it now,
    into a namespace its caller emptied of saved bindings. The committed manifest stays what it
    is: the next save compares with it and commits the revived state as a new generation."""
    state = store.revive = ReviveState("ok", body=body)
    store.tracked, store.held, store.pending = {}, {}, set()
    for name, entry in body["bindings"].items():
        store.held[name] = entry
        if name in store.namespace:
            del store.held[name]  # bound by the tool: theirs wins
            state.superseded.append(name)
        elif entry["kind"] != "alias" and store.marks.is_poisoned(name, entry["stream"]["id"]):
            state.poisoned[name] = store.marks.reason(name)
        else:
            store.pending.add(name)
    call = _Call()
    call.superseded.extend(state.superseded)
    for name in _load_order(state, set(store.pending)):
        _revive(store, state, name, call=call)
    store.journal.sync()
    update_name_error_hook(store)
    return _result(store, state, call)


def revive_now(store, name):
    """Load one pending binding at once (for the NameError hook); return None or why it failed."""
    state = store.revive
    call = _Call()
    _revive(store, state, name, call=call)
    store.journal.sync()
    return call.failed.get(name)


# -- planning --------------------------------------------------------------------------------

def _plan(store, skip):
    try:
        body = snapshot_manifest.read(store.state_dir, store.key)
    except snapshot_manifest.Refused as refused:
        if refused.kind in KEPT_IN_PLACE:
            store.revive = ReviveState("refused", _keep_in_place(str(refused)), kept_in_place=True)
        else:
            store.revive = ReviveState("refused", _set_aside(store, str(refused)))
        store.revive.refused_kind = refused.kind
        return store.revive
    except OSError as error:
        store.revive = ReviveState("refused", _set_aside(
            store, f"the snapshot manifest cannot be read ({error}); nothing was revived"))
        return store.revive
    if body is None:
        blobs = _blob_count(store)
        if blobs and snapshot_manifest.ever_committed(store.state_dir):
            # Issue 11: a deleted manifest read as a first run, with no word.
            store.revive = ReviveState("refused", _set_aside(
                store, f"the snapshot manifest is missing while {blobs} saved blob(s) remain "
                       "(deleted or lost); nothing could be revived"))
            return store.revive
        if blobs:
            # A first save stopped before its commit (a kill mid-write): its blobs belong to no
            # snapshot; the next save's sweep collects them.
            store.revive = ReviveState(
                "none", f"no snapshot exists yet for this session (a first save was stopped "
                        f"before it committed; its {blobs} partial blob(s) are discarded)")
            return store.revive
        store.revive = ReviveState("none", "no snapshot exists yet for this session")
        return store.revive
    snapshot_manifest.mark_committed(store.state_dir)
    state = store.revive = ReviveState("ok", body=body)
    store.adopt_committed(body)
    for name, entry in body["bindings"].items():
        store.held[name] = entry
        if name in store.namespace:
            del store.held[name]  # bound already (by the tool or user): theirs wins
            state.superseded.append(name)
        elif entry["kind"] != "alias" and store.marks.is_poisoned(name, entry["stream"]["id"]):
            state.poisoned[name] = store.marks.reason(name)
        elif name in skip:
            state.skipped.add(name)
        else:
            store.pending.add(name)
    return state


def _judge_unfinished(store, first_call):
    """Turn journal entries left unfinished by a dead kernel into strikes or poisoned marks
    (``snapshot_journal`` says which), then empty the journal (always on a first call)."""
    unfinished = store.journal.unfinished()
    if unfinished:
        try:
            body = store.committed or snapshot_manifest.read(store.state_dir, store.key)
        except (snapshot_manifest.Refused, OSError):
            body = None
        bindings = body["bindings"] if body else {}
        here = snapshot_journal.host_token()
        evidence = [(name, bindings[name]["stream"]["id"], host == here)
                    for name, host in unfinished
                    if name in bindings and bindings[name]["kind"] != "alias"]
        if evidence:
            store.marks.record(evidence)
    if unfinished or (first_call and not store.journal.is_empty()):
        store.journal.reset()


def _skip(store, state, skip):
    for name in skip & store.pending:
        store.pending.discard(name)
        state.skipped.add(name)


def _names_for(store, state, phase):
    if phase != "eager":
        return set(store.pending)
    eager, budget = set(), EAGER_BUFFER_BYTES
    for name in _load_order(state, store.pending):  # aliases last: their targets are decided
        entry = state.bindings[name]
        if entry["kind"] == "alias":
            if entry["alias"] in eager:
                eager.add(name)
            continue
        buffer_bytes = sum(blob["size"] for blob in entry["buffers"])
        if _stream_bytes(entry) <= EAGER_STREAM_BYTES and buffer_bytes <= budget:
            budget -= buffer_bytes
            eager.add(name)
    return eager


def _load_order(state, names):
    return sorted(names, key=lambda name: (_KIND_ORDER.get(state.bindings[name]["kind"], 3), name))


# -- loading one binding ---------------------------------------------------------------------

def _revive(store, state, name, call):
    """Revive ``name`` (and first what it refers to); return True if it is in the namespace."""
    if name in state.objects:
        return True
    if name not in store.pending or name in state.visiting:
        return False  # visiting: a reference cycle, which a manifest this code wrote never has
    state.visiting.add(name)
    try:
        return _revive_pending(store, state, name, call)
    finally:
        state.visiting.discard(name)


def _revive_pending(store, state, name, call):
    entry = state.bindings[name]
    if name in store.namespace:
        _supersede(store, name, call)
        return False
    if entry["kind"] == "alias":
        return _revive_alias(store, state, name, entry, call)
    for ref in entry["refs"]:
        if not _revive(store, state, ref, call) and ref not in state.objects \
                and ref not in store.namespace:
            return _fail(store, name, f"refers to {ref!r}, which was not revived", call)
    if "items" in entry:
        value = _unpickle_items(store, state, name, entry, call)
        if value is _FAILED:
            return False
        _adopt(store, state, name, entry, value, call)
        return True
    try:
        stream = store.blobs.read_stream(entry["stream"])
        buffers = [store.blobs.map_chunks(blob)
                   if blob["encoding"] == snapshot_blobs.ENCODING_CHUNKS
                   else store.blobs.map_buffer(blob) for blob in entry["buffers"]]
    except snapshot_blobs.CorruptBlob as error:
        return _fail(store, name, f"corrupt blob: {error}", call)
    except OSError as error:
        return _fail(store, name, f"blob unreadable: {error}", call)
    value = _unpickle(store, state, name, stream, buffers, call)
    if value is _FAILED:
        return False
    _adopt(store, state, name, entry, value, call)
    return True


_FAILED = object()


def _unpickle(store, state, name, stream, buffers, call):
    """Unpickle between journal ``start`` and ``done`` lines."""
    store.journal.start(name)
    try:
        value = snapshot_pickle.load_binding(stream, buffers, store.namespace,
                                             lambda ref: _resolve(store, state, ref))
    except KeyboardInterrupt:
        store.journal.done(name)
        raise  # the host interrupted: this binding stays pending
    except BaseException as error:  # one binding that cannot be revived costs only itself
        store.journal.done(name)
        store.marks.finished(name)
        _fail(store, name, snapshot_namespace.failure_reason(error), call)
        return _FAILED
    store.journal.done(name)
    store.marks.finished(name)
    return value


def _unpickle_items(store, state, name, entry, call):
    """A value in chunks of items (``snapshot_items``): each chunk is read and verified just
    before it is unpickled, between one pair of journal lines; a corrupt chunk fails the
    binding (nothing of it is bound)."""
    store.journal.start(name)
    try:
        value = snapshot_items.load(
            store.blobs, entry,
            lambda stream: snapshot_pickle.load_binding(
                stream, (), store.namespace, lambda ref: _resolve(store, state, ref)))
    except KeyboardInterrupt:
        store.journal.done(name)
        raise  # the host interrupted: this binding stays pending
    except snapshot_blobs.CorruptBlob as error:
        store.journal.done(name)
        store.marks.finished(name)
        _fail(store, name, f"corrupt blob: {error}", call)
        return _FAILED
    except OSError as error:
        store.journal.done(name)
        store.marks.finished(name)
        _fail(store, name, f"blob unreadable: {error}", call)
        return _FAILED
    except BaseException as error:  # one binding that cannot be revived costs only itself
        store.journal.done(name)
        store.marks.finished(name)
        _fail(store, name, snapshot_namespace.failure_reason(error), call)
        return _FAILED
    store.journal.done(name)
    store.marks.finished(name)
    return value


def _resolve(store, state, name):
    if name in state.objects:
        return state.objects[name]
    if name in store.namespace:
        return store.namespace[name]
    raise LookupError(f"binding {name!r} it refers to was not revived")


def _revive_alias(store, state, name, entry, call):
    target = entry["alias"]
    if not _revive(store, state, target, call) and target not in state.objects:
        return _fail(store, name, f"alias of {target!r}, which was not revived", call)
    value = state.objects[target]
    store.namespace[name] = value
    state.objects[name] = value
    store.pending.discard(name)
    store.held.pop(name, None)
    call.revived.append(name)
    return True


def _adopt(store, state, name, entry, value, call):
    """Bind a revived value and remember it as saved (it is what the manifest holds)."""
    store.namespace[name] = value
    state.objects[name] = value
    store.pending.discard(name)
    store.held.pop(name, None)
    refs = {ref: identity_ref(state.objects.get(ref)) for ref in entry["refs"]}
    known = snapshot_items.known_after_revive(value, entry) if "items" in entry else ()
    store.tracked[name] = Tracked(value, entry, _estimate(entry), refs, known)
    call.revived.append(name)


def _estimate(entry):
    """Seconds a fingerprint pass of a revived binding is expected to take.

    Hashing a memory-mapped buffer pages the file in, so a revived binding with about 100 MB of
    buffers or more counts as expensive (re-checked only when hinted, rebound or on a full save)
    until a save measures it.
    """
    buffer_bytes = sum(blob["size"] for blob in entry["buffers"])
    return (buffer_bytes + 5 * _stream_bytes(entry)) / ASSUMED_PAGE_IN_BYTES_PER_SECOND


def _stream_bytes(entry):
    """Bytes of pickle stream to unpickle: the stream, plus every item chunk's."""
    return entry["stream"]["size"] + snapshot_items.item_bytes(entry)


def _supersede(store, name, call):
    store.pending.discard(name)
    store.held.pop(name, None)
    call.superseded.append(name)


def _fail(store, name, reason, call):
    store.pending.discard(name)  # stays held: carried into the next manifest
    call.failed[name] = reason
    return False


# -- results ---------------------------------------------------------------------------------

def _result(store, state, call):
    body = state.body or {}
    return {
        "status": state.status,
        "reason": state.reason,
        "saved_at": body.get("saved_at"),
        "revived": call.revived,
        "pending": sorted(store.pending),
        "failed": call.failed,
        "poisoned": dict(state.poisoned),
        "unsaved": dict(body.get("unsaved", {})),
        "superseded": call.superseded,
        "skipped": sorted(state.skipped),
        # Which of the host's answered cells the revived snapshot holds (the host's journal of
        # answered cells is read against it); absent before pi-repl recorded it.
        "cells": body.get("cells"),
        "kept_in_place": state.kept_in_place,
        "refused_kind": state.refused_kind,
        "packages": _packages_result(state, call),
    }


def _ensure_packages(store, body):
    tracker = getattr(store, "packages", None)
    if tracker is None:
        return None
    tracker.adopt(body.get("packages"))
    return packages.ensure(tracker, reinstall=getattr(store, "reinstall_packages", True))


def _packages_result(state, call):
    """What the revive did about the session's packages (only the first call reports it)."""
    report = getattr(state, "packages", None)
    if not report or (not report["reinstalled"] and not report["missing"]):
        return None
    state.packages = None
    failed = dict(call.failed)
    failed.update(state.poisoned)
    return {**report, "missing": packages.needed_by(report["missing"], failed)}


def _blob_count(store):
    """Files in the blob store (a snapshot's content, with or without its manifest)."""
    root = os.path.join(store.state_dir, "blobs")
    try:
        return sum(len(files) for _, _, files in os.walk(root))
    except OSError:
        return 0


KEPT_IN_PLACE = (snapshot_manifest.FOREIGN, snapshot_manifest.NEWER)
"""Refusals that leave the snapshot where it is: the key that signed it, or a newer pi-repl,
reads it as it is, so a start with either revives it with no other step."""


def _keep_in_place(reason):
    """Issue 21: a snapshot signed with another key used to be set aside and a new one signed
    with the wrong key took its place; the right key then found nothing to revive."""
    return f"{reason}; it is kept where it is, unchanged, and nothing is saved over it"


def _set_aside(store, reason):
    """Keep a refused snapshot out of the next save's way instead of letting it be replaced: the
    whole state directory (manifest, blobs, journal, marks) is renamed
    ``<state dir>.refused-<UTC time>`` beside it, and an empty one takes its place. Returns the
    reason with where it was kept (or why it could not be)."""
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    aside = f"{store.state_dir.rstrip(os.sep)}.refused-{stamp}"
    store.journal.close()
    try:
        os.rename(store.state_dir, aside)
        os.mkdir(store.state_dir, 0o700)
    except OSError as error:
        return f"{reason}; it could not be set aside ({error}), so the next save replaces it"
    return f"{reason}; it was kept, unchanged, at {aside}, and the workspace starts a new snapshot"


# -- the NameError hook ----------------------------------------------------------------------

PENDING_MESSAGE = ("name {name!r} was still being revived in the background; it is loaded now "
                   "\u2014 run the cell again.")
FAILED_MESSAGE = "name {name!r} could not be revived from the snapshot: {reason}"


def update_name_error_hook(store):
    """Install the hook while names are pending (under IPython only); remove it when none are.

    Another custom exception handler already installed is left alone.
    """
    shell = store.shell
    if shell is None:
        return
    if store.pending and not store.hook_installed and shell.custom_exceptions == ():
        shell.set_custom_exc((NameError,), _name_error_handler(store))
        store.hook_installed = True
    elif not store.pending and store.hook_installed:
        if shell.custom_exceptions == (NameError,):
            shell.set_custom_exc((), None)
        store.hook_installed = False


def _name_error_handler(store):
    def handle(shell, etype, value, tb, tb_offset=None):
        name = getattr(value, "name", None)
        if isinstance(name, str) and name in store.pending:
            reason = revive_now(store, name)
            text = (PENDING_MESSAGE.format(name=name) if reason is None
                    else FAILED_MESSAGE.format(name=name, reason=reason))
            value = NameError(text).with_traceback(tb)
        shell.showtraceback((etype, value, tb), tb_offset=tb_offset)
        update_name_error_hook(store)
        return None

    return handle

