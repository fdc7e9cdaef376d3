"""pi-repl default helper: ``write``.

A helper file like any user's (see docs/helpers.md); the file handling it shares with ``read``,
``edit`` and ``bash`` (path policy, atomic writer) is in ``pi_repl_kernel.toolbox_support``.
"""

import os
import stat

from pi_repl_kernel import toolbox_support as _io

helper_description = (
    "Write text to a file atomically (keeps mode/owner, creates parents); says what it did."
)


def write(path, content, force=False):
    """Write ``content`` to the file at ``path``, replacing it atomically; return a confirmation.

    Arguments:
        path: the file; a relative path is resolved against the kernel's current directory,
            ``~`` is expanded. Missing parent directories are created. If ``path`` is a symbolic
            link, the file it points to is written (the link stays).
        content: a ``str`` (written as UTF-8, exactly as given: no newline is added or
            translated) or ``bytes``.
        force: write even over a read-only file (its mode stays read-only).

    Returns a one-line ``str`` such as ``Created /abs/path (3 lines, 42 bytes).`` or
    ``Overwrote /abs/path (3 lines, 42 bytes; was 30 bytes).``

    Where it may write: inside the session's working directory, or a directory named in
    ``$PI_REPL_ALLOW_WRITE`` (``:``-separated; ``*`` allows anywhere). The check is made on the
    real path, after symbolic links, so a link pointing out of the project is refused too.

    The write is atomic: the content goes to a temporary file in the same directory, is flushed
    to disk, and is renamed over ``path``, so a reader (or a crash) sees the old file or the new
    one, never half of it. An existing file keeps its permission bits, its owner and group (when
    this process may set them) and its extended attributes (POSIX ACLs included); what could not
    be kept is said in the result. A new file gets ``0o666`` minus the umask. (Like any rename, it
    gives the path a new inode: hard links to the old file keep the old content.)

    Raises:
        PermissionError: ``path`` is outside the allowed directories (the message names the
            variable to set), or the file is read-only and ``force`` is not set, or the
            directory cannot be written.
        TypeError: ``content`` is neither ``str`` nor ``bytes`` (convert it: ``str(x)``,
            ``json.dumps(x)``).
        IsADirectoryError: ``path`` is a directory. ValueError: it is a FIFO, device or socket.

    Examples::

        write("notes/todo.md", "- ship it\\n")
        write("data.json", json.dumps(record, indent=2) + "\\n")
    """
    full = _io.resolve(path)
    if isinstance(content, str):
        data = content.encode("utf-8")
    elif isinstance(content, (bytes, bytearray, memoryview)):
        data = bytes(content)
    else:
        raise TypeError(
            f"write() takes the content as str or bytes, got {type(content).__name__}: "
            "convert it first, e.g. write(path, str(value)) or write(path, json.dumps(value))"
        )
    target = _io.check_write_allowed(full, "write")
    try:
        before = os.stat(target)
    except FileNotFoundError:
        before = None
    if before is not None and not stat.S_ISREG(before.st_mode):
        if stat.S_ISDIR(before.st_mode):
            raise IsADirectoryError(f"{full} is a directory; write() needs a file path inside it")
        _io.open_regular(target, "write")  # raises, naming the kind of file
    if before is not None and not force and _read_only(target, before):
        raise PermissionError(
            f"{full} is read-only (mode {stat.filemode(before.st_mode)}); write() leaves it "
            f"alone. Pass force=True to replace it anyway (it stays read-only)."
        )
    parent = os.path.dirname(target)
    made = _missing_ancestor(parent)
    os.makedirs(parent, exist_ok=True)
    mode = stat.S_IMODE(before.st_mode) if before else 0o666 & ~_io.umask()
    lost = _io.replace_file(target, data, mode, like=before)

    lines = data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
    amount = f"{lines:,} line{'s' * (lines != 1)}, {len(data):,} byte{'s' * (len(data) != 1)}"
    lost_note = f" Could not keep: {', '.join(lost)}." if lost else ""
    if before is None:
        made_note = f"; made directory {made}" if made else ""
        return _io.Text(f"Created {full} ({amount}{made_note}).")
    return _io.Text(f"Overwrote {full} ({amount}; was {before.st_size:,} bytes).{lost_note}")


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


def _read_only(target, info):
    """No write bit at all (a deliberate 0444, which root could otherwise write), or not
    writable by this process."""
    return not info.st_mode & 0o222 or not os.access(target, os.W_OK)
