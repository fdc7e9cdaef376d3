"""How the host calls into the kernel-side module and reads a result back.

The host runs a *silent* cell (no execution count, no history, nothing bound in the user's
namespace)::

    __import__("pi_repl_kernel.host", fromlist=["call"]).call("helpers", "load", '["/p/x.py"]')

with the user expression ``__import__("pi_repl_kernel.host", fromlist=["reply"]).reply()``.
``call`` imports ``pi_repl_kernel.<module>``, calls ``<function>`` with the JSON-decoded arguments
(a list of positional arguments, or ``{"args": [...], "kwargs": {...}}``), and keeps the
JSON-serialisable result; ``reply()`` returns an object whose
``repr`` is that result as JSON, so the ``text/plain`` of the user expression in the
``execute_reply`` is exactly the JSON text. Results never pass through stdout, so whatever the
called code prints stays apart from them.

Exceptions (including a KeyboardInterrupt the host sends to preempt work) propagate: the cell
then ends with an error and no user expression, which the host reads as "no result".
"""

import importlib
import json

_last = None

calling = False
"""True while a host call runs (``thread_output`` does not tie threads started now to it)."""


def call(module, function, arguments_json="[]"):
    """Call ``pi_repl_kernel.<module>.<function>`` with the decoded arguments; keep the result."""
    global _last, calling
    _last = None
    calling = True
    try:
        target = getattr(importlib.import_module(f"pi_repl_kernel.{module}"), function)
        arguments = json.loads(arguments_json)
        if isinstance(arguments, dict):
            _last = target(*arguments.get("args", ()), **arguments.get("kwargs", {}))
        else:
            _last = target(*arguments)
    finally:
        calling = False


class _Json:
    """A value whose repr is its JSON text (what IPython puts in ``text/plain``)."""

    __slots__ = ("text",)

    def __init__(self, value):
        self.text = json.dumps(value, default=str)

    def __repr__(self):
        return self.text


def reply():
    """The last ``call``'s result as an object whose repr is JSON."""
    return _Json(_last)
