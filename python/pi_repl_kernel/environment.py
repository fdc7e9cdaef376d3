"""One interpreter for cells and their shells.

Owns: the kernel process's ``PATH`` and ``VIRTUAL_ENV``, set once before the kernel starts
(``launch``) or when the module attaches to a running kernel (``remote.attach``), so that
``python``, ``pip``, ``python -m ...`` and the scripts of installed packages, run from ``!cmd``,
``%%bash``, the toolbox's ``bash(...)`` or ``subprocess``, resolve to the kernel's own
environment: ``pip install`` from a shell installs where the cells import from (issue 28).

Does not own: installing packages (``packages``).

Invariants: the directory of ``sys.executable`` is first on ``PATH`` (once: an earlier copy of it
further down is removed); ``VIRTUAL_ENV`` names ``sys.prefix`` when the interpreter is a venv's
and is unset otherwise (a venv the host happened to have activated is not the kernel's).
"""

import os
import sys


def adopt_own_interpreter(environ=None):
    """Make the shells a cell starts find this interpreter first (see the module docstring).
    Returns the directory put first on ``PATH``, or None when ``sys.executable`` is unknown."""
    environ = os.environ if environ is None else environ
    if not sys.executable:
        return None
    bin_dir = os.path.dirname(sys.executable)
    rest = [entry for entry in environ.get("PATH", "").split(os.pathsep)
            if entry and os.path.normpath(entry) != os.path.normpath(bin_dir)]
    environ["PATH"] = os.pathsep.join([bin_dir, *rest])
    if in_venv():
        environ["VIRTUAL_ENV"] = sys.prefix
    else:
        environ.pop("VIRTUAL_ENV", None)
    return bin_dir


def in_venv():
    """Whether this interpreter runs in a virtual environment (venv or virtualenv)."""
    return sys.prefix != getattr(sys, "base_prefix", sys.prefix)
