"""Which names of the user namespace a snapshot holds, and how their values are classified.

Owns: the excluded names, alias grouping, the immutability test behind "same object, nothing to
pickle", kinds and type names, and the short human texts (sizes, reasons). Pure functions: no I/O.

Invariants:

- Never saved: IPython's own names (``shell.user_ns_hidden`` entries still bound to the same
  object, ``In``, ``Out``, ``_``, ``__``, ``___``, ``_i``, ``_ii``, ``_iii``, ``_i<n>``, ``_<n>``,
  ``_oh``, ``_dh``, ``_ih``, ``_exit_code``, ``get_ipython``, ``exit``, ``quit``), dunder names,
  and the tool's ``protected_names``. A key that is not a ``str`` is ignored (it cannot be named);
  a ``str`` that is not an identifier is reported unsaved.
- Aliases: names bound to one object that is not immutable are grouped; the alphabetically first
  name is canonical (stable while both names exist), the others are aliases of it.
"""

import re
import types

IPYTHON_NAMES = frozenset({
    "In", "Out", "_", "__", "___", "_i", "_ii", "_iii", "_oh", "_dh", "_ih", "_exit_code",
    "get_ipython", "exit", "quit",
})
_IPYTHON_NUMBERED = re.compile(r"_i?\d+")

ATOMIC_IMMUTABLE = frozenset({
    int, float, complex, str, bytes, bool, type(None), type(Ellipsis), type(NotImplemented),
    range,
})
"""Types whose values never change (exact types: a subclass may add mutable state)."""
_IMMUTABLE_CHECK_BUDGET = 10_000
"""Elements a tuple/frozenset may have, in total, to be checked for deep immutability."""


class Scan:
    """The saveable part of a namespace.

    ``canonical``: name -> object, sorted by name, one name per distinct mutable object.
    ``aliases``: alias name -> canonical name. ``invalid``: name -> reason it cannot be saved.
    ``present``: every str name in the namespace (saved or not), to tell a rebinding from a gap.
    ``ignored``: how many keys were not strings.
    """

    def __init__(self):
        self.canonical = {}
        self.aliases = {}
        self.invalid = {}
        self.present = set()
        self.ignored = 0


def scan(namespace, hidden, protected):
    """Classify the names of ``namespace`` (see ``Scan``)."""
    result = Scan()
    by_identity = {}
    for name, value in sorted(_str_items(namespace, result), key=lambda item: item[0]):
        result.present.add(name)
        if is_excluded(name, value, hidden, protected):
            continue
        if not name.isidentifier():
            result.invalid[name] = "not a Python identifier"
            continue
        if is_immutable(value):
            result.canonical[name] = value
            continue
        canonical = by_identity.setdefault(id(value), name)
        if canonical == name:
            result.canonical[name] = value
        else:
            result.aliases[name] = canonical
    return result


def _str_items(namespace, result):
    items = []
    for name, value in list(namespace.items()):
        if isinstance(name, str):
            items.append((name, value))
        else:
            result.ignored += 1
    return items


def is_excluded(name, value, hidden, protected):
    """True for names the store never saves (IPython's, dunders, the tool's own)."""
    if name in protected or name in IPYTHON_NAMES:
        return True
    if name.startswith("__") and name.endswith("__"):
        return True
    if _IPYTHON_NUMBERED.fullmatch(name):
        return True
    return name in hidden and hidden[name] is value


def is_immutable(value, budget=None):
    """True if ``value`` can never change: same object means same content, nothing to pickle."""
    budget = [_IMMUTABLE_CHECK_BUDGET] if budget is None else budget
    kind = type(value)
    if kind in ATOMIC_IMMUTABLE:
        return True
    if kind is not tuple and kind is not frozenset:
        return False
    budget[0] -= len(value)
    if budget[0] < 0:
        return False  # too large to prove cheaply: treat as mutable and fingerprint it
    return all(is_immutable(item, budget) for item in value)


def kind_of(value):
    """The manifest ``kind`` of a saved value."""
    if isinstance(value, types.ModuleType):
        return "module"
    if isinstance(value, type):
        return "class"
    if type(value) is types.FunctionType:
        return "function"
    return "value"


def type_name(value):
    """``module.qualname`` of the value's type, e.g. ``numpy.ndarray``."""
    kind = type(value)
    return f"{getattr(kind, '__module__', '?')}.{getattr(kind, '__qualname__', kind.__name__)}"


def format_size(size):
    """A byte count as a short text: ``512 B``, ``3.2 MiB``, ``2 GiB``."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            value = size / scale
            text = f"{value:.1f}".rstrip("0").rstrip(".")
            return f"{text} {unit}"
    return f"{size} B"


def failure_reason(error, limit=200):
    """A one-line reason for an exception raised while pickling or unpickling one binding."""
    message = str(error).strip().splitlines()[0] if str(error).strip() else ""
    if isinstance(error, KeyboardInterrupt):
        text = "KeyboardInterrupt raised by the object itself"
    elif isinstance(error, TypeError) and message:
        text = message
    else:
        text = f"{type(error).__name__}: {message}" if message else type(error).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"
