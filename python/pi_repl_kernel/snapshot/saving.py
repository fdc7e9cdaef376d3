"""Saving the user namespace incrementally: only what changed is pickled into new blobs.

Owns: deciding per binding whether it changed, the caps, aliases, writing new blobs, committing
the manifest, collecting garbage, and preemption by the host's SIGINT. Does not own: pickling
itself (``snapshot_pickle``), the blob layout (``snapshot_blobs``) or the manifest format
(``snapshot_manifest``).

Per canonical binding, cheapest check first:

1. Same object as last saved, and immutable (``snapshot_namespace.is_immutable``) or a module:
   unchanged, nothing pickled.
2. **Expensive binding**: same object as last saved, its last fingerprint pass took longer than
   ``EXPENSIVE_SECONDS``, its name is not in ``hint_names``, the bindings it refers to are still
   the same objects, and ``full`` is false: assumed unchanged, not re-checked. An in-place change
   to such a binding by code that does not mention its name is seen at the next ``full`` save.
   A revived binding's cost is estimated from its stored size (``snapshot_restore``).
3. Otherwise pickle it (out-of-band buffers zero-copy) and fingerprint it: the xxh3_128 ids of
   the stream and of each buffer's chunks (``snapshot_blobs.CHUNK_BYTES``). Equal to the last
   saved fingerprint: unchanged, nothing written. Different: the bytes of that same pass are
   compressed and written (never pickled twice), except a stream or chunk already stored, so a
   large buffer changed in a few places writes only the chunks that hold the changes.
   A large list or dict of plain data is cut into chunks of items instead (``snapshot_items``):
   a chunk whose items are the very objects of a chunk the store knows is not pickled at all,
   any other is pickled alone, and only chunks not already stored are written.

One binding that cannot be saved costs only itself: every exception from pickling it, including
``KeyboardInterrupt`` raised by its own ``__reduce__``, names it in ``skipped``.

Preemption: during ``save`` a SIGINT handler records that the host interrupted and raises
``KeyboardInterrupt``. A ``KeyboardInterrupt`` while pickling a binding is the host's (re-raised,
the save stops) if that flag is set, and the binding's own otherwise; a flag set while a
``__reduce__`` swallowed the exception still stops the save after that binding. Nothing the store
believes is touched before the commit: a stopped save leaves the last manifest current and
loadable, its temp files removed, and its already-written blobs recorded as orphans to collect.
The commit itself (manifest rename + in-memory update) is a critical section in which a SIGINT
is only recorded, so the store never disagrees with the disk; once the commit is done the save
reports it (``committed``) rather than raising, and skips the garbage collection for this time.
The host may also ask cooperatively: it creates ``<state_dir>/preempt``, which the save checks
at every safe point and answers with ``{"committed": False, "preempted": True}`` (no signal, so
no chance of interrupting ipykernel's own code and losing the reply).
"""

import datetime
import os
import platform
import signal
import time

import cloudpickle

from . import blobs as snapshot_blobs
from . import items as snapshot_items
from . import manifest as snapshot_manifest
from . import names as snapshot_namespace
from . import pickling as snapshot_pickle
from . import kept_states as snapshot_states
from .store import Preempted, Tracked, fingerprint_of, identity_ref

EXPENSIVE_SECONDS = 0.1
"""A binding whose fingerprint pass took longer is re-checked only when told (see above)."""


def save(store, hint_names=None, full=False):
    """Snapshot ``store.namespace``; return the summary dict of the API."""
    started = time.perf_counter()
    refusal = _refusal(store)
    if refusal:
        return {"committed": False, "error": refusal}
    with HostInterrupts(store.preempt_path) as interrupts:
        plan = _Plan(store, set(hint_names or ()), full, interrupts)
        plan.check_all()
        plan.settle()
        body = plan.manifest_body()
        written_manifest = _write_and_commit(store, plan, body, interrupts)
    asked_to_stop = interrupts.requested or (
        store.preempt_path is not None and os.path.exists(store.preempt_path))
    swept = 0 if asked_to_stop else _sweep(store, full)  # collection can wait for the next save
    summary = plan.summary(body, written_manifest, swept, started)
    store.last_save = summary
    return summary


def _refusal(store):
    """Why saving now would be wrong, or None."""
    if store.revive is None and os.path.exists(store.manifest_path):
        return ("a snapshot exists and restore() has not been called in this kernel yet; "
                "saving now would replace it with this kernel's namespace. Call restore() first")
    if store.revive is not None and store.revive.kept_in_place:
        # Issue 21: a snapshot another key signed (or a newer pi-repl wrote) is left where it is
        # for the start that can read it; saving would replace it.
        return (f"the snapshot in place was refused and is kept unchanged ({store.revive.reason}); "
                "nothing is saved over it")
    return None


class HostInterrupts:
    """SIGINT during a save: remember that the host asked, and stop (see the module docstring)."""

    def __init__(self, preempt_path=None):
        self.requested = False
        self._preempt_path = preempt_path
        self._critical = False
        self._previous = None
        self._installed = False

    def __enter__(self):
        try:
            self._previous = signal.signal(signal.SIGINT, self._handle)
            self._installed = True
        except ValueError:
            self._installed = False  # not the main thread: no signal can arrive here
        return self

    def __exit__(self, *exc):
        if self._installed:
            signal.signal(signal.SIGINT, self._previous)
        return False

    def _handle(self, signum, frame):
        if self._previous is signal.SIG_IGN:
            return  # interrupts were ignored before this save; keep ignoring them
        self.requested = True
        if not self._critical:
            raise KeyboardInterrupt

    def check(self):
        """Stop now if the host interrupted (a ``__reduce__`` may have swallowed the exception),
        or asked to stop by creating the preempt file (cooperative: no signal races)."""
        if self.requested:
            raise KeyboardInterrupt
        if self._preempt_path and os.path.exists(self._preempt_path):
            raise Preempted

    def critical(self):
        return _Critical(self)


class _Critical:
    def __init__(self, interrupts):
        self._interrupts = interrupts

    def __enter__(self):
        self._interrupts._critical = True

    def __exit__(self, exc_type, exc, tb):
        # A commit that finished stands: an interrupt that arrived during it is moot, and the
        # save reports the commit (raising now would tell the host nothing was saved).
        self._interrupts._critical = False
        return False


class _Outcome:
    """What the save decided for one canonical binding."""

    __slots__ = ("name", "value", "status", "entry", "pickled", "cost", "reason", "excluded",
                 "previous", "views", "chunked")

    UNCHANGED = "unchanged"
    UNCHECKED = "unchecked"
    CHANGED = "changed"
    FAILED = "failed"

    def __init__(self, name, value, previous):
        self.name = name
        self.value = value
        self.previous = previous
        self.status = None
        self.entry = None
        self.pickled = None
        self.cost = None
        self.reason = None
        self.excluded = set()
        self.views = ()
        """The out-of-band buffers this save's fingerprint pass read (see ``release_memory``)."""
        self.chunked = None
        """The ``snapshot_items.Chunked`` of a value this save cut into chunks of items."""

    @property
    def saved(self):
        return self.status != self.FAILED

    def fail(self, reason):
        self.status, self.reason, self.entry, self.pickled = self.FAILED, reason, None, None


class _Plan:
    """One save: the outcomes of every binding, then the caps, then the manifest."""

    def __init__(self, store, hints, full, interrupts):
        self.store = store
        self.hints = hints
        self.full = full
        self.interrupts = interrupts
        self.scan = snapshot_namespace.scan(store.namespace, store.hidden_names(), store.protected)
        self.targets = _ref_targets(self.scan.canonical)
        self.cells = snapshot_pickle.cell_owners(self.scan.canonical, store.namespace)
        self.outcomes = {}
        self.held = {name: entry for name, entry in store.held.items()
                     if name not in self.scan.present}
        self.held_dropped = {}
        self.stored_chunks = {}
        """blob id -> blob of every item chunk the committed manifest holds (not compressed
        again when a chunk pickles to one of them)."""
        for entry in (store.committed or {}).get("bindings", {}).values():
            self.stored_chunks.update(snapshot_items.stored_chunks(entry))
        self.written_bytes = 0
        self.new_files = set()

    # -- deciding what changed -------------------------------------------------------------

    def check_all(self):
        """Check every binding, values before functions before classes.

        Pickling an instance caches ``__slotnames__`` on its class; checking instances first
        means a class is fingerprinted after that one-time change, not before it.
        """
        order = sorted(self.scan.canonical.items(),
                       key=lambda item: (-snapshot_pickle.rank_of(item[1]), item[0]))
        for name, value in order:
            self.outcomes[name] = self._check(name, value)
            self.interrupts.check()
        self.outcomes = dict(sorted(self.outcomes.items()))

    def _check(self, name, value):
        outcome = _Outcome(name, value, self.store.tracked.get(name))
        previous = outcome.previous
        same = previous is not None and previous.holds(value)
        if same and (snapshot_namespace.is_immutable(value) or snapshot_namespace.kind_of(
                value) == "module"):
            outcome.status, outcome.entry = _Outcome.UNCHANGED, previous.entry
        elif same and self._may_skip_expensive(name, previous):
            outcome.status, outcome.entry = _Outcome.UNCHECKED, previous.entry
        else:
            self._fingerprint(outcome)
        return outcome

    def _may_skip_expensive(self, name, previous):
        return (previous.cost > EXPENSIVE_SECONDS and not self.full and name not in self.hints
                and previous.refs_unchanged(self.scan.canonical))

    def _fingerprint(self, outcome):
        """Pickle once; unchanged if the fingerprint matches, otherwise keep the bytes."""
        value = outcome.value
        container = snapshot_items.container_of(value)
        if container is not None and self._fingerprint_items(outcome, container):
            return
        targets = self.targets[snapshot_pickle.rank_of(value)]
        if outcome.excluded:
            targets = {key: name for key, name in targets.items() if name not in outcome.excluded}
        cells = {cell: owner for cell, owner in self.cells.items()
                 if owner[0] < outcome.name and owner[0] not in outcome.excluded}
        started = time.perf_counter()
        try:
            pickled = snapshot_pickle.dump_binding(value, self.store.namespace, targets, cells)
            fingerprint = (snapshot_blobs.content_id(pickled.stream),
                           tuple(tuple(snapshot_blobs.content_id(chunk)
                                       for chunk in snapshot_blobs.chunk_views(view))
                                 for view in pickled.buffers))
        except KeyboardInterrupt as error:
            if self.interrupts.requested:
                raise
            outcome.fail(snapshot_namespace.failure_reason(error))
            return
        except BaseException as error:  # one binding that cannot be saved costs only itself
            self.interrupts.check()
            outcome.fail(snapshot_namespace.failure_reason(error))
            return
        outcome.cost = time.perf_counter() - started
        outcome.views = pickled.buffers
        previous = outcome.previous
        if previous is not None and previous.fingerprint == fingerprint:
            outcome.status, outcome.entry = _Outcome.UNCHANGED, previous.entry
            return
        outcome.status, outcome.pickled = _Outcome.CHANGED, pickled
        outcome.entry = _pending_entry(value, pickled, fingerprint)

    def _fingerprint_items(self, outcome, container):
        """A large list or dict: chunks of items, pickled only where their items are not the
        known ones (``snapshot_items``). Return False if an item is not plain data (the value is
        then pickled whole, as any other)."""
        previous = outcome.previous
        known = previous.known_chunks if previous is not None else ()
        started = time.perf_counter()
        try:
            chunked = snapshot_items.dump(outcome.value, container, known, self.stored_chunks,
                                          frozen=self.store.frozen_image)
        except KeyboardInterrupt as error:
            if self.interrupts.requested:
                raise
            outcome.fail(snapshot_namespace.failure_reason(error))
            return True
        except BaseException as error:  # one binding that cannot be saved costs only itself
            self.interrupts.check()
            outcome.fail(snapshot_namespace.failure_reason(error))
            return True
        if chunked is None:
            return False
        outcome.cost = time.perf_counter() - started
        outcome.chunked = chunked
        head_id = snapshot_blobs.content_id(chunked.head)
        if previous is not None and previous.fingerprint == (head_id, ()):
            outcome.status, outcome.entry = _Outcome.UNCHANGED, previous.entry
            return True
        outcome.status, outcome.pickled = _Outcome.CHANGED, chunked
        outcome.entry = _pending_items_entry(outcome.value, chunked, head_id)
        return True

    # -- caps and references ---------------------------------------------------------------

    def settle(self):
        """Apply the caps, then re-pickle bindings that refer to a binding no longer saved."""
        while True:
            self._apply_binding_cap()
            self._apply_total_cap()
            broken = self._broken_refs()
            if not broken:
                return
            for outcome, missing in broken:
                outcome.excluded |= missing
                outcome.status = None
                self._fingerprint(outcome)
                self.interrupts.check()

    def _apply_binding_cap(self):
        """The per-binding cap bounds a binding's pickle stream, which is read whole to revive
        it; out-of-band buffers are chunked, so only the disk (and the total cap) bounds them."""
        cap = self.store.max_binding_bytes
        for outcome in self.outcomes.values():
            stream_bytes = outcome.entry["stream"]["stored"] if outcome.saved else 0
            if stream_bytes > cap:
                outcome.fail(f"{snapshot_namespace.format_size(stream_bytes)}, over the "
                             f"{snapshot_namespace.format_size(cap)} per-binding cap")

    def _apply_total_cap(self):
        cap = self.store.max_total_bytes
        changed = [o for o in self.outcomes.values() if o.status == _Outcome.CHANGED]
        others = [o for o in self.outcomes.values() if o.saved and o.status != _Outcome.CHANGED]
        for group in (changed, others, list(self.held)):
            for item in sorted(group, key=self._size_of, reverse=True):
                if self._total_bytes() <= cap:
                    return
                reason = (f"{snapshot_namespace.format_size(self._size_of(item))}, dropped to keep "
                          f"the snapshot under the {snapshot_namespace.format_size(cap)} total cap "
                          "(the largest changed bindings are dropped first)")
                if isinstance(item, str):
                    self.held_dropped[item] = reason
                    del self.held[item]
                else:
                    item.fail(reason)

    def _size_of(self, item):
        if isinstance(item, str):
            return self.held[item].get("stored_bytes", 0)
        return _stored_bytes(item)

    def _total_bytes(self):
        sizes = {}
        for entry in self._saved_entries():
            for blob in snapshot_manifest.entry_blobs(entry):
                sizes[snapshot_blobs.filename(blob)] = blob["stored"]
        return sum(sizes.values())

    def _saved_entries(self):
        entries = [o.entry for o in self.outcomes.values() if o.saved]
        entries += [e for e in self.held.values() if e["kind"] != "alias"]
        return entries

    def _broken_refs(self):
        kept = {name for name, o in self.outcomes.items() if o.saved} | set(self.held)
        broken = []
        for outcome in self.outcomes.values():
            if outcome.saved:
                missing = set(outcome.entry["refs"]) - kept
                if missing:
                    broken.append((outcome, missing))
        return broken

    # -- the manifest ----------------------------------------------------------------------

    def manifest_body(self):
        bindings, unsaved = {}, dict(self.scan.invalid)
        for name, outcome in self.outcomes.items():
            if outcome.saved:
                bindings[name] = outcome.entry
            else:
                unsaved[name] = outcome.reason
        for name, target in self.scan.aliases.items():
            if target in bindings:
                bindings[name] = {"kind": "alias", "alias": target,
                                  "type": snapshot_namespace.type_name(self.outcomes[target].value)}
            else:
                unsaved[name] = f"alias of {target}, which was not saved ({unsaved[target]})"
        for name, entry in self.held.items():
            if entry["kind"] != "alias" or entry["alias"] in self.held:
                bindings[name] = entry
            else:
                unsaved[name] = (f"alias of {entry['alias']}, whose stored value is no longer in "
                                 "the snapshot (rebound or dropped before it was revived)")
        unsaved.update(self.held_dropped)
        previous = self.store.committed or {}
        return {
            "format": snapshot_manifest.FORMAT,
            "version": snapshot_manifest.VERSION,
            "saved_at": _now(),
            "generation": max(int(previous.get("generation", 0)),
                              int(getattr(self.store, "generation_floor", 0))) + 1,
            # Which process committed it: the host tells a save child's commit from the manifest
            # itself when the child died before its report (killed with its kernel).
            "saved_by": os.getpid(),
            # A save child's random token: its pid may repeat in a later kernel's namespace.
            "saved_by_token": getattr(self.store, "save_token", None),
            # Which of the host's answered cells this image holds: up to ``through``, except the
            # ``missing`` ones (lost to a dead kernel, not yet named in a delivered result). The
            # host's journal of answered cells is read against it (``docs/snapshot-format.md``).
            "cells": self.store.cells or previous.get("cells"),
            "python": platform.python_version(),
            "cloudpickle": cloudpickle.__version__,
            "bindings": bindings,
            "unsaved": unsaved,
            "stored_bytes": self._total_bytes(),
            # What the session added to the kernel's environment (``packages``): reinstalled
            # before the bindings come back in an environment that lacks them.
            "packages": _packages_record(self.store),
        }

    def write_blobs(self):
        """Write the blobs of changed bindings: a stream, or a buffer's chunk, already stored is
        not rewritten, so a large buffer changed in a few places writes only those chunks."""
        blobs = self.store.blobs
        frozen = self.store.frozen_image
        changed = [o for o in self.outcomes.values() if o.status == _Outcome.CHANGED]
        alone = _alone(view for outcome in changed for view in outcome.pickled.buffers) \
            if frozen else set()
        try:
            for outcome in changed:
                entry, pickled = outcome.entry, outcome.pickled
                self._write(snapshot_blobs.filename(entry["stream"]), entry["stream"]["data"])
                for blob in entry.get("items", {}).get("chunks", ()):
                    if "data" in blob:  # else stored already (``snapshot_items.dump``)
                        self._write(snapshot_blobs.filename(blob), blob["data"])
                    self.interrupts.check()
                for buffer, view in zip(entry["buffers"], pickled.buffers):
                    chunks = snapshot_manifest.buffer_blobs(buffer)
                    for blob, part in zip(chunks, snapshot_blobs.chunk_views(view)):
                        self._write_raw(blob, part, frozen)
                        if id(view) in alone:
                            snapshot_blobs.release_pages(part)  # no later write reads it
                        self.interrupts.check()
            if frozen:
                self.release_memory()
            blobs.publish()
        except BaseException:
            blobs.discard_unpublished()
            raise

    def release_memory(self):
        """In a save child, once every buffer is written: drop the child's pages of the buffers
        it read, so a cell rewriting them in the kernel meanwhile copies nothing (a page the
        child no longer maps is the kernel's alone). Nothing in the child reads them again.
        A buffer no other written buffer overlaps was released chunk by chunk as it was written
        (``write_blobs``): the child's writing runs ahead of a kernel rewriting page by page
        through copy-on-write faults, so most pages are the kernel's alone by the time it
        reaches them."""
        for outcome in self.outcomes.values():
            for view in outcome.views:
                snapshot_blobs.release_pages(view)

    def _write(self, name, data):
        if name in self.store.committed_files:
            return
        written = self.store.blobs.write(name, data)
        self.new_files.add(name)
        self.written_bytes += written

    def _write_raw(self, blob, view, frozen):
        """Write a raw buffer or chunk; its file (and ``blob["id"]``) is named by the bytes
        written."""
        if snapshot_blobs.filename(blob) in self.store.committed_files:
            return
        written = self.store.blobs.write_raw(blob, view, frozen)
        self.new_files.add(snapshot_blobs.filename(blob))
        self.written_bytes += written

    def summary(self, body, written_manifest, swept, started):
        changed = sorted(n for n, o in self.outcomes.items() if o.status == _Outcome.CHANGED)
        return {
            "committed": True,
            "manifest_written": written_manifest,
            "bindings": len(body["bindings"]),
            "written": changed,
            "unchanged": sum(o.status in (_Outcome.UNCHANGED, _Outcome.UNCHECKED)
                             for o in self.outcomes.values()),
            "not_rechecked": sorted(n for n, o in self.outcomes.items()
                                    if o.status == _Outcome.UNCHECKED),
            "aliases": {n: e["alias"] for n, e in body["bindings"].items() if e["kind"] == "alias"},
            "skipped": dict(body["unsaved"]),
            "held": sorted(self.held),
            "written_bytes": self.written_bytes,
            "stored_bytes": body["stored_bytes"],
            "swept": swept,
            "elapsed_ms": round((time.perf_counter() - started) * 1000, 1),
        }


def _pending_entry(value, pickled, fingerprint):
    """A manifest entry for a changed binding; the compressed stream rides along until written."""
    stream_id, buffer_ids = fingerprint
    compressed = snapshot_blobs.compress(pickled.stream)
    stream_size = len(pickled.stream)
    pickled.stream = None  # until written, a save holds only the compressed bytes
    buffers = [_buffer_entry(ids, view) for ids, view in zip(buffer_ids, pickled.buffers)]
    distinct = {blob["id"]: blob["stored"] for buffer in buffers
                for blob in snapshot_manifest.buffer_blobs(buffer)}
    return {
        "kind": snapshot_namespace.kind_of(value),
        "type": snapshot_namespace.type_name(value),
        "stream": {"id": stream_id, "encoding": snapshot_blobs.ENCODING_ZSTD,
                   "size": stream_size, "stored": len(compressed), "data": compressed},
        "buffers": buffers,
        "stored_bytes": len(compressed) + sum(distinct.values()),
        "refs": list(pickled.refs),
    }


def _pending_items_entry(value, chunked, head_id):
    """The manifest entry of a value in chunks of items: a head stream (no data, see
    ``snapshot_items.head_stream``) and the ``items`` object; compressed chunks ride along in
    their blobs until written."""
    compressed = snapshot_blobs.compress(chunked.head)
    items = snapshot_items.entry_items(chunked)
    return {
        "kind": snapshot_namespace.kind_of(value),
        "type": snapshot_namespace.type_name(value),
        "stream": {"id": head_id, "encoding": snapshot_blobs.ENCODING_ZSTD,
                   "size": len(chunked.head), "stored": len(compressed), "data": compressed},
        "buffers": [],
        "items": items,
        "stored_bytes": len(compressed) + items["stored"],
        "refs": [],
    }


def _alone(views):
    """``id`` of each writable view whose memory no other view of ``views`` overlaps."""
    spans = []
    for view in views:
        span = snapshot_blobs.address_span(view)
        if span is not None:
            spans.append((span[0], span[1], id(view)))
    spans.sort()
    alone = set()
    for index, (start, end, key) in enumerate(spans):
        overlaps_earlier = any(other_end > start for _, other_end, _ in spans[:index])
        overlaps_later = index + 1 < len(spans) and spans[index + 1][0] < end
        if not overlaps_earlier and not overlaps_later:
            alone.add(key)
    return alone


def _buffer_entry(chunk_ids, view):
    """The manifest object of one out-of-band buffer: a raw blob, or its chunks."""
    parts = snapshot_blobs.chunk_views(view)
    chunks = [{"id": blob_id, "encoding": snapshot_blobs.ENCODING_RAW, "size": part.nbytes,
               "stored": part.nbytes} for blob_id, part in zip(chunk_ids, parts)]
    if len(chunks) == 1:
        return chunks[0]
    stored = sum({chunk["id"]: chunk["stored"] for chunk in chunks}.values())
    return {"encoding": snapshot_blobs.ENCODING_CHUNKS, "size": memoryview(view).nbytes,
            "stored": stored, "chunks": chunks}


def _stored_bytes(outcome):
    return outcome.entry["stored_bytes"]


def _ref_targets(canonical):
    """For each root rank, ``id -> name`` of the bindings a root of that rank may refer to."""
    by_rank = {rank: {} for rank in (snapshot_pickle.RANK_CLASS, snapshot_pickle.RANK_FUNCTION,
                                     snapshot_pickle.RANK_VALUE)}
    for name, value in canonical.items():
        target_rank = snapshot_pickle.rank_of(value)
        for root_rank, targets in by_rank.items():
            if target_rank < root_rank:
                targets[id(value)] = name
    return by_rank


def _write_and_commit(store, plan, body, interrupts):
    """Write new blobs and the manifest; return whether a manifest was written.

    A manifest identical in content to the committed one is not rewritten.
    """
    try:
        plan.write_blobs()
        entries = _strip_data(body)
        if store.committed is not None and _same_content(store.committed, entries):
            _remember(store, plan)
            _same_state(store, entries)
            return False
        data = snapshot_manifest.encode(entries, store.key)
        _keep_state(store, entries, data)
        with interrupts.critical():
            snapshot_manifest.write(store.state_dir, entries, store.key)  # the same bytes
            _after_commit(store, plan, entries)
        return True
    except BaseException:
        store.orphans |= plan.new_files - store.committed_files
        raise


def _keep_state(store, body, data):
    """Keep the manifest about to be committed as its cell's state, for a rewind
    (``snapshot_states``), before the rename: a committed state is always kept. A failure to
    keep it (a full disk) costs that state's rewind only, never the commit."""
    cell = snapshot_states.cell_of(body)
    if cell is None:
        return
    try:
        snapshot_states.keep(store.state_dir, cell, data)
    except OSError as error:
        store.state_error = f"the state after cell {cell} could not be kept: {error}"


def _same_state(store, body):
    """A save that changed nothing for a later cell: that cell's state is the committed one's."""
    cell, earlier = snapshot_states.cell_of(body), snapshot_states.cell_of(store.committed)
    if cell is None or earlier is None or cell <= earlier:
        return
    try:
        snapshot_states.same_as(store.state_dir, cell, earlier)
    except OSError as error:
        store.state_error = f"the state after cell {cell} could not be kept: {error}"


def _strip_data(body):
    """The body without the in-memory compressed bytes of new streams."""
    for entry in body["bindings"].values():
        if entry["kind"] != "alias":
            entry["stream"].pop("data", None)
            for blob in entry.get("items", {}).get("chunks", ()):
                blob.pop("data", None)
    return body


def _same_content(committed, body):
    return all(committed.get(key) == body[key]
               for key in ("bindings", "unsaved", "python", "cloudpickle", "packages"))


def _packages_record(store):
    """``{canonical name: {"name", "version", "modules"}}`` of what the session installed."""
    tracker = getattr(store, "packages", None)
    if tracker is None:
        return {}
    tracker.refresh()
    return {name: dict(entry) for name, entry in sorted(tracker.added.items())}


def _after_commit(store, plan, body):
    """The manifest is durable: make the in-memory state match it and collect garbage."""
    previous_files = store.committed_files | store.orphans
    store.adopt_committed(body)
    store.orphans = set()
    # Blobs a kept state names stay: a rewind may still need them (``snapshot_states``).
    kept, released = snapshot_states.enforce_window(store.state_dir, store.committed_files,
                                                    store.keep_states, store.keep_bytes)
    store.blobs.remove((previous_files | released) - kept)
    _remember(store, plan)
    written = [n for n, o in plan.outcomes.items() if o.status == _Outcome.CHANGED]
    store.marks.clear(set(written) | _stale_marks(store.marks, body))


def _stale_marks(marks, body):
    """Marks (poisonings and strikes) whose binding is gone from the snapshot or now holds
    another stored value."""
    stale = set()
    for name in marks.marks:
        entry = body["bindings"].get(name)
        if entry is None or entry["kind"] == "alias" or \
                entry["stream"]["id"] != marks.marks[name]["stream"]:
            stale.add(name)
    return stale


def _remember(store, plan):
    """Track what the committed manifest holds for each binding of the namespace."""
    tracked = {}
    store.confirmed_chunks = {}
    for name, outcome in plan.outcomes.items():
        if not outcome.saved:
            continue
        previous = outcome.previous
        if outcome.chunked is not None:
            # The items this save pickled or compared are now known, with their blobs.
            store.confirmed_chunks[name] = outcome.chunked.confirmed()
            tracked[name] = Tracked(outcome.value, outcome.entry, outcome.cost, {},
                                    outcome.chunked.known())
            continue
        if _still_describes(previous, outcome):
            if outcome.cost is not None:
                previous.cost = outcome.cost
            tracked[name] = previous
            continue
        refs = {ref: identity_ref(plan.scan.canonical[ref]) for ref in outcome.entry["refs"]
                if ref in plan.scan.canonical}
        tracked[name] = Tracked(outcome.value, outcome.entry, outcome.cost or 0.0, refs)
    store.tracked = tracked
    store.held = dict(plan.held)
    store.pending &= set(plan.held)


def _still_describes(previous, outcome):
    """True if the tracked record of the last save is still right for this outcome."""
    return (previous is not None and previous.holds(outcome.value)
            and outcome.status != _Outcome.CHANGED
            and fingerprint_of(previous.entry) == fingerprint_of(outcome.entry))


def _sweep(store, full):
    """Collect every unreferenced blob and old temp file: on the first save, and on full ones."""
    if store.swept and not full:
        return 0
    removed = store.blobs.sweep(snapshot_states.kept_files(store.state_dir, store.committed_files))
    snapshot_states.remove_old_temps(store.state_dir, snapshot_blobs.TEMP_MAX_AGE_SECONDS,
                                     time.time())
    store.swept = True
    return removed


def _now():
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds") \
        .replace("+00:00", "Z")

