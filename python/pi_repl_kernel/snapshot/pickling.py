"""Pickling one binding of the user namespace, and loading it back.

Owns: how a single top-level binding becomes a pickle stream (cloudpickle, protocol 5) plus its
out-of-band buffers, and how such a stream is loaded. Does not own: where bytes are stored,
fingerprints, which names are saved (``snapshot_save``), or when anything is loaded
(``snapshot_restore``).

Invariants:

- **Live globals (design trap 7).** A function whose ``__globals__`` *is* the user namespace is
  reduced to "rebuild this code against the namespace being revived into": its code, name,
  defaults, keyword defaults, closure, ``__dict__``, qualname, module, annotations and doc are
  pickled, its globals never are. This holds wherever the function sits: a top-level binding, a
  method of a class defined in the namespace (cloudpickle pickles such classes by value and their
  functions pass through ``reducer_override``), a lambda in a list. A revived function therefore
  sees the live namespace (``X = 2`` after revive is visible to it), and a function that reads a
  100 MB global does not carry that global in its own blob.
- **References between bindings.** While pickling binding R, an object that is itself another
  top-level binding T is written as a reference to T (revived first, then shared) when T's rank is
  lower than R's: classes (rank 1) < functions (rank 2) < everything else (rank 3). So an
  instance refers to its class instead of carrying a copy, and ``handlers = [f, g]`` shares ``f``
  and ``g`` with the namespace. References only go down in rank, so they can never form a cycle.
  Only objects that reach ``reducer_override`` can be references: not ``list``/``dict``/``set``/
  ``tuple``/``str``/... (the C pickler handles those before asking), which are copied instead.
- **Shared closure cells.** Functions of one stream that share a closure cell share it again
  when loaded (one stand-in cell per original cell, written once). Functions made by one call
  (``inc, get = make()``) share the cells of the variables they close over; when they are
  separate top-level bindings, each such cell is owned by the alphabetically first top-level
  namespace function holding it (``cell_owners``): the owner's stream carries the cell's value,
  and every other function whose closure holds it gets, in its place, a reference to "cell i of
  the owner" (the owner is listed in its ``refs``, revived first, and its very cell object is put
  into the rebuilt closure). So after a revive ``inc()`` is still seen by ``get()``. These
  references point from a function to a function with a smaller name, so they cannot form a
  cycle either (and classes never refer to functions).
- **Out-of-band buffers.** A ``PickleBuffer`` of at least ``OUT_OF_BAND_MIN_BYTES`` (numpy arrays,
  a top-level ``bytearray``) leaves the stream and is returned separately, zero-copy; smaller ones
  stay in the stream.
- Loading resolves the live namespace and references through a per-thread *load context* set by
  ``load_binding``; a stream loaded outside it gets a private empty namespace.
"""

import builtins
import io
import pickle
import sys
import threading
import types

import cloudpickle

OUT_OF_BAND_MIN_BYTES = 64 * 1024
"""Buffers this large or larger are kept out of the pickle stream (stored raw, memory-mappable)."""

PROTOCOL = 5

RANK_CLASS = 1
RANK_FUNCTION = 2
RANK_VALUE = 3


def rank_of(obj):
    """The reference rank of a top-level object (see the module docstring)."""
    if isinstance(obj, type):
        return RANK_CLASS
    if type(obj) is types.FunctionType:
        return RANK_FUNCTION
    return RANK_VALUE


class Pickled:
    """One binding, pickled: the stream, its out-of-band buffers, and the bindings it refers to."""

    __slots__ = ("stream", "buffers", "refs")

    def __init__(self, stream, buffers, refs):
        self.stream = stream
        self.buffers = buffers
        self.refs = refs

    @property
    def buffer_bytes(self):
        return sum(buffer.nbytes for buffer in self.buffers)


def cell_owners(canonical, namespace):
    """``id(cell) -> (owner name, index in its closure)`` for every closure cell shared by two or
    more top-level functions of ``namespace`` (``canonical``: name -> object). The owner is the
    alphabetically first function holding the cell."""
    holders = {}
    for name in sorted(canonical):
        func = canonical[name]
        if type(func) is not types.FunctionType or func.__globals__ is not namespace:
            continue
        for index, cell in enumerate(func.__closure__ or ()):
            holders.setdefault(id(cell), []).append((name, index))
    return {cell_id: found[0] for cell_id, found in holders.items() if len(found) > 1}


def dump_binding(obj, namespace, targets, cells=None):
    """Pickle ``obj`` (one top-level binding) and return a ``Pickled``.

    ``namespace`` is the user namespace (functions whose globals are it are rebuilt against the
    live namespace at load time). ``targets`` maps ``id(other binding)`` to its name, already
    restricted to bindings of a lower rank than ``obj``. ``cells`` is the part of
    ``cell_owners`` whose owners ``obj`` may refer to (owners named before it, still saved).
    Raises whatever pickling raises.
    """
    buffers = []

    def take_buffer(picklebuffer):
        view = picklebuffer.raw()
        if view.nbytes < OUT_OF_BAND_MIN_BYTES:
            return True  # a true value keeps the buffer in-band
        buffers.append(view)
        return False

    stream = io.BytesIO()
    root = _ByteArrayRoot(obj) if type(obj) is bytearray else obj
    pickler = _NamespacePickler(stream, namespace, targets, root, take_buffer, cells or {})
    pickler.dump(root)
    return Pickled(stream.getvalue(), buffers, tuple(sorted(pickler.refs)))


def load_binding(stream, buffers, namespace, resolve_ref):
    """Unpickle one binding. ``resolve_ref(name)`` returns the revived object of another binding."""
    previous = getattr(_context, "frame", None)
    _context.frame = (namespace, resolve_ref)
    try:
        return pickle.loads(stream, buffers=buffers)
    finally:
        _context.frame = previous


class _NamespacePickler(cloudpickle.Pickler):
    """cloudpickle's pickler, plus live-namespace functions and references to other bindings."""

    def __init__(self, file, namespace, targets, root, buffer_callback, cells):
        super().__init__(file, protocol=PROTOCOL, buffer_callback=buffer_callback)
        self._namespace = namespace
        self._targets = targets
        self._root = root
        self._cells = cells
        self._fresh_cells = {}
        """id(cell) -> the one empty cell that stands for it in this stream (see below)."""
        self.refs = set()

    def reducer_override(self, obj):
        name = self._targets.get(id(obj))
        if name is not None and obj is not self._root:
            self.refs.add(name)
            return (_binding_ref, (name,))
        if type(obj) is types.FunctionType and obj.__globals__ is self._namespace:
            shared = [self._cells.get(id(cell)) for cell in obj.__closure__ or ()]
            self.refs.update(owner[0] for owner in shared if owner is not None)
            fresh = [self._fresh_cells.setdefault(id(cell), (types.CellType(), cell))[0]
                     for cell in obj.__closure__ or ()]
            return _reduce_namespace_function(obj, self._namespace, shared, fresh)
        return super().reducer_override(obj)


class _ByteArrayRoot:
    """Pickles a top-level bytearray through a PickleBuffer, so a large one goes out-of-band."""

    __slots__ = ("data",)

    def __init__(self, data):
        self.data = data

    def __reduce_ex__(self, protocol):
        return (bytearray, (pickle.PickleBuffer(self.data),))


class _EmptyCell:
    """Marks a closure cell that was empty when pickled (pickled by reference, as a class)."""


class _SharedCell:
    """Marks a closure cell whose value its owner function carries (pickled by reference)."""


class _CellRef:
    """Stands for cell ``index`` of the closure of binding ``owner`` in a pickled closure."""

    __slots__ = ("owner", "index")

    def __init__(self, owner, index):
        self.owner = owner
        self.index = index

    def __reduce__(self):
        return (_owner_cell, (self.owner, self.index))


def _reduce_namespace_function(func, namespace, shared, fresh):
    """Reduce a function to a rebuild against the live namespace; its globals are not pickled.

    ``shared[i]`` is ``(owner, index)`` when closure cell i belongs to another binding (written
    as a reference to that cell), else None. ``fresh[i]`` is the empty cell that stands for cell
    i in this stream: one per original cell, so functions of one stream that share a cell (a
    ``pair = make()``) share it again once loaded (the pickler writes that cell once).
    """
    closure = None
    if func.__closure__ is not None:
        closure = tuple(cell if owner is None else _CellRef(*owner)
                        for owner, cell in zip(shared, fresh))
    state = {
        "qualname": _fresh(func.__qualname__),
        "module": _fresh(func.__module__),
        "doc": _fresh(func.__doc__),
        "defaults": func.__defaults__,
        "kwdefaults": func.__kwdefaults__,
        "annotations": func.__annotations__,
        "dict": dict(func.__dict__),
        "closure": _closure_values(func, shared),
        "submodules": _submodules_used(func, namespace),
    }
    return (_rebuild_function, (func.__code__, _fresh(func.__name__), closure), state, None, None,
            _set_function_state)


def _fresh(text):
    """A new, uninterned copy of a string (None stays None).

    The pickler memoizes by identity, so whether two equal names are one object (interned) or two
    changes the stream. Interning differs between the saving process and a reviving one; fresh
    copies make a revived function pickle to the same bytes, hence the same fingerprint.
    """
    return "".join(text) if isinstance(text, str) else text


def _closure_values(func, shared):
    if func.__closure__ is None:
        return None
    values = []
    for cell, owner in zip(func.__closure__, shared):
        if owner is not None:
            values.append(_SharedCell)  # its owner's stream carries the value
            continue
        try:
            values.append(cell.cell_contents)
        except ValueError:  # an empty cell (a variable not yet assigned in the outer scope)
            values.append(_EmptyCell)
    return values


def _submodules_used(func, namespace):
    """Submodules (``os.path``) the code reaches through a module global, so loading imports them.

    Uses cloudpickle's own helpers (pinned version); without them nothing extra is imported.
    """
    internals = cloudpickle.cloudpickle
    extract = getattr(internals, "_extract_code_globals", None)
    find = getattr(internals, "_find_imported_submodules", None)
    if extract is None or find is None:
        return []
    modules = [namespace[name] for name in extract(func.__code__)
               if isinstance(namespace.get(name), types.ModuleType)]
    return find(func.__code__, modules) if modules else []


_context = threading.local()


def _live_namespace():
    frame = getattr(_context, "frame", None)
    if frame is None:
        return {"__builtins__": builtins}
    return frame[0]


def _rebuild_function(code, name, closure):
    """Load-time half of ``_reduce_namespace_function``: a function over the live namespace."""
    return types.FunctionType(code, _live_namespace(), name, None, closure)


def _set_function_state(func, state):
    func.__qualname__ = state["qualname"]
    func.__module__ = state["module"]
    func.__doc__ = state["doc"]
    func.__defaults__ = state["defaults"]
    func.__kwdefaults__ = state["kwdefaults"]
    func.__annotations__ = state["annotations"]
    func.__dict__.update(state["dict"])
    if state["closure"] is not None:
        for cell, value in zip(func.__closure__, state["closure"]):
            if value is not _EmptyCell and value is not _SharedCell:
                cell.cell_contents = value
    return func


def _owner_cell(owner, index):
    """Load-time half of a ``_CellRef``: the very cell of the revived owner function."""
    func = _binding_ref(owner)
    closure = getattr(func, "__closure__", None) or ()
    if index >= len(closure):
        raise pickle.UnpicklingError(f"binding {owner!r} has no closure cell {index}")
    return closure[index]


def _binding_ref(name):
    """Load-time half of a reference: the revived object of binding ``name``."""
    frame = getattr(_context, "frame", None)
    if frame is None:
        raise pickle.UnpicklingError(f"refers to binding {name!r}, outside a snapshot restore")
    return frame[1](name)



# Streams written before the snapshot modules moved into this subpackage name this module by
# its old path (``_rebuild_function``, ``_EmptyCell``, ...): it answers to both, so those
# snapshots still revive.
sys.modules.setdefault("pi_repl_kernel.snapshot_pickle", sys.modules[__name__])
