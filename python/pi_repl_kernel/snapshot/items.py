"""Large lists and dicts of plain data, stored as chunks of items (format version 3).

Owns: which values are stored in item chunks, cutting them into chunks, the "same items as the
last save" test that lets a chunk skip pickling, pickling one chunk, the manifest's ``items``
object and its head stream, and joining the chunks back into one value. Does not own: blobs
(``snapshot_blobs``), the manifest's other fields (``snapshot_manifest``), or deciding when a
binding is saved (``snapshot_save``).

Invariants:

- **Only plain data is chunked.** A value is stored in chunks only if its type is exactly
  ``list`` or ``dict``, it has at least ``MIN_ITEMS`` items, and every item (every key and
  value) is *deeply immutable*: an ``int``, ``float``, ``complex``, ``str``, ``bytes``,
  ``bool``, ``None``, ``Ellipsis``, ``NotImplemented``, ``range``, or a tuple or frozenset of
  those (``ATOMIC``). Anything else (a list holding one inner list, object or function) is
  pickled whole, as before. Each chunk is a pickle stream of its own, so two items of different
  chunks that were one object come back as two equal objects; for immutable values that changes
  nothing a program computes (only ``is`` between such items, and memory: ``[s] * n`` of one
  long string stores and revives one copy per chunk).
- **Chunks**: items ``[i * CHUNK_ITEMS, (i + 1) * CHUNK_ITEMS)``, in list order or the dict's
  insertion order. A list chunk pickles the list of its items; a dict chunk the pair
  ``(keys, values)``.
- **A chunk is not pickled again** only when its items are the very objects (``is``, compared
  at C speed; in a save child, the list's item pointers compared as bytes, which writes no
  reference count and so copies none of the kernel's pages) of a chunk the store knows, and the
  store knows which blob holds them (``Known``).
  The store holds a known chunk's items by strong reference (a shallow list), so no id is
  reused while it is remembered, and immutable items cannot have changed. Any other chunk is
  checked for atoms and pickled; equal content gives the same blob id, so nothing is written.
- Known chunks come from a save that committed (the items it pickled or compared), or from a
  revive (the items unpickled from a verified blob). A save child cannot hand its objects to the
  kernel, so it reports which chunks it *confirmed* (found identical to the kernel's records at
  the fork); the kernel keeps those records and takes the other chunks' items from the live
  value as *candidates* (no blob yet): the next save compares its image with a candidate, and
  if identical pickles it once more and confirms it (``snapshot_fork``).
"""

import ctypes
import operator
import pickle
import struct
import sys

from . import blobs as snapshot_blobs
from . import names as snapshot_namespace

CHUNK_ITEMS = 65_536
"""Items per chunk. A 2M-item list of small tuples is 31 chunks of about 1-2 MB pickled each."""

MIN_ITEMS = 131_072
"""Lists and dicts with fewer items are pickled whole (one chunk would gain nothing)."""

MAX_DEPTH = 32
"""Tuples nested deeper than this are not checked, so not treated as plain data."""

LIST = "list"
DICT = "dict"
_CONTAINERS = {list: LIST, dict: DICT}
ATOMIC = frozenset(snapshot_namespace.ATOMIC_IMMUTABLE)
_NESTED = frozenset({tuple, frozenset})
_ATOMIC_OR_NESTED = ATOMIC | _NESTED


def container_of(value):
    """``"list"`` or ``"dict"`` if ``value`` is large enough to be chunked, else None (its items
    are not looked at here)."""
    container = _CONTAINERS.get(type(value))
    if container is None or len(value) < MIN_ITEMS:
        return None
    return container


class Known:
    """One chunk the store knows: its items (a list, or ``(keys, values)`` for a dict) and the
    manifest blob that holds them, or None for a candidate (items taken from the live value
    after a save child committed, blob not known yet)."""

    __slots__ = ("items", "blob")

    def __init__(self, items, blob):
        self.items = items
        self.blob = blob


class Chunk:
    """One chunk of this save: its items, its blob (``data``: the compressed stream, until
    written; None when reused), and whether it matched the known chunk at its place."""

    __slots__ = ("items", "blob", "confirmed")

    def __init__(self, items, blob, confirmed):
        self.items = items
        self.blob = blob
        self.confirmed = confirmed


class Chunked:
    """A value cut into chunks by ``dump``; ``head`` is the head stream (see ``head_stream``)."""

    __slots__ = ("container", "count", "chunks", "head", "buffers", "refs")

    def __init__(self, container, count, chunks):
        self.container = container
        self.count = count
        self.chunks = chunks
        self.head = head_stream(container, count, [chunk.blob["id"] for chunk in chunks])
        self.buffers = ()
        self.refs = ()

    def known(self):
        """What the store remembers once this save committed (in the process that saved)."""
        return tuple(Known(chunk.items, _bare(chunk.blob)) for chunk in self.chunks)

    def confirmed(self):
        return [chunk.confirmed for chunk in self.chunks]


def head_stream(container, count, chunk_ids):
    """The binding's ``stream`` in the manifest: a pickle of ``(container, count, [chunk ids])``.

    It holds no data; its id changes whenever a chunk does, so everything keyed on a binding's
    stream id (fingerprints, poison marks) keeps working."""
    return pickle.dumps(_head(container, count, chunk_ids), protocol=5)


def _head(container, count, chunk_ids):
    return (container, count, list(chunk_ids))


def dump(value, container, known, stored, frozen=False):
    """Cut ``value`` into chunks; return a ``Chunked``, or None if an item is not plain data.

    ``known``: the ``Known`` chunks of the binding's last save (or ()). ``stored``: blob id ->
    manifest blob of item chunks the committed manifest holds: a known chunk is reused only if
    its blob is one of them, and a pickled chunk with such an id is not compressed again.
    ``frozen``: a save child's image (one thread, nothing changes): a list chunk is compared by
    its item pointers, without touching the items (see ``_Source.holds``). Raises whatever
    pickling raises.
    """
    source = _Source(value, container, frozen)
    decided = []
    for index, start in enumerate(source.starts):  # every chunk is decided before any pickling
        record = known[index] if index < len(known) else None
        if record is not None and source.holds(start, record.items):
            decided.append((record.items, record))
            continue
        items = source.part(start)
        if not _plain(items, container):
            return None
        decided.append((items, None))
    chunks = []
    for items, record in decided:
        if record is not None and record.blob is not None and record.blob["id"] in stored:
            chunks.append(Chunk(items, dict(stored[record.blob["id"]]), True))
            continue
        confirmed = record is not None
        stream = pickle_chunk(items)
        blob_id = snapshot_blobs.content_id(stream)
        blob = stored.get(blob_id)
        if blob is not None:
            blob = dict(blob)
        else:
            data = snapshot_blobs.compress(stream)
            blob = {"id": blob_id, "encoding": snapshot_blobs.ENCODING_ZSTD,
                    "size": len(stream), "stored": len(data), "data": data}
        chunks.append(Chunk(items, blob, confirmed))
    return Chunked(container, source.count, chunks)


def _load_items_address():
    """``items_address(list)``: the address of a CPython list's item array (``ob_item``, after
    the object's reference count, type and size), or None where that layout does not hold (it
    is checked here on a probe list, not assumed)."""
    gil_enabled = getattr(sys, "_is_gil_enabled", None)  # 3.13+: False in a free-threaded run
    if sys.implementation.name != "cpython" or (gil_enabled is not None and not gil_enabled()):
        return None
    offset = 3 * ctypes.sizeof(ctypes.c_void_p)

    def items_address(items):
        return ctypes.c_void_p.from_address(id(items) + offset).value

    probe = [object(), object(), object()]
    try:
        found = ctypes.string_at(items_address(probe), 3 * ctypes.sizeof(ctypes.c_void_p))
    except (OSError, ValueError, TypeError, ctypes.ArgumentError):
        return None
    return items_address if found == struct.pack("3P", *map(id, probe)) else None


_items_address = _load_items_address()


def _same_pointers(items, start, known, length):
    """True if ``items[start:start + length]`` are the objects of ``known`` (``length`` items),
    comparing the two item arrays as bytes. Only in a save child: no item's reference count is
    written, so the kernel's pages of 2M items stay shared instead of being copied (an ``is``
    loop writes every item's count). Unsafe where another thread may resize ``items`` between
    reading its array's address and its bytes, hence not in the kernel."""
    width = ctypes.sizeof(ctypes.c_void_p)
    here, there = _items_address(items), _items_address(known)
    if not here or not there or start + length > len(items):
        return False
    return ctypes.string_at(here + start * width, length * width) == \
        ctypes.string_at(there, length * width)


def pickle_chunk(items):
    """The pickle stream of one chunk's items (plain data: no out-of-band buffers)."""
    return pickle.dumps(items, protocol=5)


class _Source:
    """A value's chunks: compared in place (no copy of an unchanged chunk's items: slicing and
    freeing 2M references costs as much as comparing them), sliced only when needed."""

    def __init__(self, value, container, frozen=False):
        self.container = container
        self.frozen = frozen and _items_address is not None
        if container == LIST:
            self.lists = (value,)
        else:  # the dict's keys and values, in insertion order
            self.lists = (list(value), list(value.values()))
        self.count = len(self.lists[0])
        self.starts = range(0, self.count, CHUNK_ITEMS)

    def part(self, start):
        """The items of the chunk at ``start``: a list, or ``(keys, values)`` for a dict."""
        parts = tuple(items[start:start + CHUNK_ITEMS] for items in self.lists)
        return parts[0] if self.container == LIST else parts

    def holds(self, start, old):
        """True if the chunk at ``start`` holds exactly the objects of ``old`` (a known chunk's
        items), in order: identity, compared at C speed."""
        olds = (old,) if self.container == LIST else old
        if type(olds) is not tuple or len(olds) != len(self.lists):
            return False  # a known chunk of the other container
        length = min(CHUNK_ITEMS, self.count - start)
        for items, known in zip(self.lists, olds):
            if type(known) is not list or len(known) != length:
                return False
            if self.frozen:
                if not _same_pointers(items, start, known, length):
                    return False
                continue
            current = iter(items)
            current.__setstate__(start)  # map() stops at the end of ``known``
            if not all(map(operator.is_, known, current)):
                return False
        return True


def _plain(items, container):
    if container == DICT:
        return all_atoms(items[0]) and all_atoms(items[1])
    return all_atoms(items)


def all_atoms(items):
    """True if every item is deeply immutable plain data (see the module docstring): exact
    types only, a level of nesting at a time, at C speed."""
    level = items
    for _ in range(MAX_DEPTH):
        kinds = set(map(type, level))
        if kinds <= ATOMIC:
            return True
        if not kinds <= _ATOMIC_OR_NESTED:
            return False
        level = [inner for item in level if type(item) in _NESTED for inner in item]
    return False


def entry_items(chunked):
    """The manifest's ``items`` object (the chunks still carry ``data`` until written)."""
    stored = {chunk.blob["id"]: chunk.blob["stored"] for chunk in chunked.chunks}
    return {"container": chunked.container, "count": chunked.count,
            "stored": sum(stored.values()), "chunks": [chunk.blob for chunk in chunked.chunks]}


def stored_chunks(entry):
    """blob id -> blob of the item chunks of a manifest entry (empty if it has none)."""
    items = entry.get("items") if entry else None
    if not items:
        return {}
    return {blob["id"]: blob for blob in items["chunks"]}


def item_bytes(entry):
    """Uncompressed bytes of the item chunks of a manifest entry (0 if it has none)."""
    items = entry.get("items")
    return sum(blob["size"] for blob in items["chunks"]) if items else 0


def known_after_revive(value, entry):
    """The ``Known`` chunks of a value just revived from ``entry`` (its items came from those
    verified blobs)."""
    items = entry["items"]
    source = _Source(value, items["container"])
    return tuple(Known(source.part(start), _bare(blob))
                 for start, blob in zip(source.starts, items["chunks"]))


def known_after_child(value, container, confirmed, previous):
    """The ``Known`` chunks the kernel keeps once a save child committed ``value`` in chunks:
    a confirmed chunk keeps the record it was found identical to (``previous``, the kernel's at
    the fork), with the committed blob; any other is a candidate, its items taken from ``value``
    now (``value`` may have changed since the fork: a candidate is only ever compared, never
    trusted)."""
    source = _Source(value, container) if _CONTAINERS.get(type(value)) == container else None
    known = []
    for index, (ok, blob) in enumerate(confirmed):
        record = previous[index] if ok and index < len(previous) else None
        if record is not None:
            known.append(Known(record.items, _bare(blob)))
        elif source is not None and index < len(source.starts):
            known.append(Known(source.part(source.starts[index]), None))
        else:
            known.append(Known([], None))  # matches nothing: that chunk is pickled next time
    return tuple(known)


def load(store_blobs, entry, load_chunk):
    """Read, verify and unpickle the chunks of ``entry`` one at a time and join them; raise
    ``snapshot_blobs.CorruptBlob`` if a chunk is not intact or they do not add up."""
    items = entry["items"]
    head = pickle.loads(store_blobs.read_stream(entry["stream"]))  # verified: ours, plain data
    if head != _head(items["container"], items["count"], [blob["id"] for blob in items["chunks"]]):
        raise snapshot_blobs.CorruptBlob("the head stream does not name the manifest's chunks")
    value = [] if items["container"] == LIST else {}
    for blob in items["chunks"]:
        part = load_chunk(store_blobs.read_stream(blob))
        if items["container"] == LIST:
            value.extend(part)
        else:
            value.update(zip(*part))
    if len(value) != items["count"]:
        raise snapshot_blobs.CorruptBlob(f"the chunks hold {len(value)} items, expected "
                                         f"{items['count']}")
    return value


def _bare(blob):
    return {key: value for key, value in blob.items() if key != "data"}
