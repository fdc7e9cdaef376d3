"""pi-repl default helper: ``write``.

A helper file like any user's (see docs/helpers.md): it is self-contained (standard library
only, no import of the other toolbox files), so a user can copy or replace it on its own. The
atomic write below is therefore repeated in ``edit.py`` on purpose.
"""

import os
import stat

from pi_repl_kernel.toolbox_support import Text as _Text
from pi_repl_kernel.toolbox_support import write_atomic as _write_atomic

helper_description = "Write text to a file atomically, creating parent dirs; says what it did."


def write(path, content):
    """Write ``content`` to the file at ``path``, replacing it atomically; return a confirmation.

    Arguments:
        path: the file; a relative path is resolved against the kernel's current directory,
            ``~`` is expanded. Missing parent directories are created. If ``path`` is a symbolic
            link, the file it points to is written (the link stays).
        content: a ``str`` (written as UTF-8, exactly as given: no newline is added or
            translated) or ``bytes``.

    Returns a one-line ``str`` such as ``Created /abs/path (3 lines, 42 bytes).`` or
    ``Overwrote /abs/path (3 lines, 42 bytes; was 30 bytes).``

    The write is atomic: the content goes to a temporary file in the same directory, is flushed
    to disk, and is renamed over ``path``, so a reader (or a crash) sees the old file or the new
    one, never half of it. An existing file keeps its permission bits; a new one gets the usual
    ``0o666`` minus the umask. (Like any rename, it gives the path a new inode: hard links to the
    old file keep the old content.)

    Raises:
        TypeError: ``content`` is neither ``str`` nor ``bytes`` (convert it: ``str(x)``,
            ``json.dumps(x)``).
        IsADirectoryError: ``path`` is a directory.
        PermissionError / OSError: the directory cannot be created or written.

    Examples::

        write("notes/todo.md", "- ship it\\n")
        write("data.json", json.dumps(record, indent=2) + "\\n")
    """
    full = os.path.abspath(os.path.expanduser(os.fspath(path)))
    if isinstance(content, str):
        data = content.encode("utf-8")
    elif isinstance(content, (bytes, bytearray, memoryview)):
        data = bytes(content)
    else:
        raise TypeError(
            f"write() takes the content as str or bytes, got {type(content).__name__}: "
            "convert it first, e.g. write(path, str(value)) or write(path, json.dumps(value))"
        )
    target = os.path.realpath(full) if os.path.islink(full) else full
    if os.path.isdir(target):
        raise IsADirectoryError(f"{full} is a directory; write() needs a file path inside it")
    parent = os.path.dirname(target)
    made = _missing_ancestor(parent)
    os.makedirs(parent, exist_ok=True)
    try:
        before = os.stat(target)
    except FileNotFoundError:
        before = None
    mode = stat.S_IMODE(before.st_mode) if before else 0o666 & ~_umask()
    _write_atomic(target, data, mode)

    lines = data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
    amount = f"{lines:,} line{'s' * (lines != 1)}, {len(data):,} byte{'s' * (len(data) != 1)}"
    if before is None:
        made_note = f"; made directory {made}" if made else ""
        return _Text(f"Created {full} ({amount}{made_note}).")
    return _Text(f"Overwrote {full} ({amount}; was {before.st_size:,} bytes).")


def _missing_ancestor(directory):
    """The outermost directory ``os.makedirs(directory)`` would create, or None."""
    missing = None
    while directory and not os.path.isdir(directory):
        missing = directory
        parent = os.path.dirname(directory)
        if parent == directory:
            break
        directory = parent
    return missing


def _umask():
    """The process umask, read without changing it where /proc allows."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass  # no /proc (macOS): fall back to setting and restoring it
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
