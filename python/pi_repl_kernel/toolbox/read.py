"""pi-repl default helper: ``read``.

A helper file like any user's (see docs/helpers.md): it is self-contained (standard library
only, no import of the other toolbox files), so a user can copy or replace it on its own.
"""

import difflib
import os

from pi_repl_kernel.toolbox_support import Text as _Text

helper_description = "Return a text file's contents; offset/limit give a numbered range of lines."

MAX_BYTES = 256 * 1024
"""Largest file ``read`` returns whole; past it, read a range (the text is meant to be read)."""

MAX_LINES = 2000
"""Most lines ``read`` returns without an explicit ``limit``."""

_SNIFF_BYTES = 8192  # how much of the head is checked for NUL bytes before anything else


def read(path, offset=None, limit=None):
    """Return the text of the file at ``path`` (UTF-8, line endings as they are on disk).

    Arguments:
        path: the file; a relative path is resolved against the kernel's current directory,
            ``~`` is expanded.
        offset: 1-based number of the first line to return. Giving ``offset`` or ``limit``
            switches to numbered output: each line is prefixed with its number and a tab
            (``cat -n`` style), so an ``edit`` can refer to what you saw.
        limit: how many lines to return from ``offset`` (default: to the end of the file).

    Returns the whole text, or the numbered lines ``offset`` to ``offset + limit - 1``. The
    string is a ``str``; a cell that ends with ``read(...)`` shows it as plain text.

    Raises:
        FileNotFoundError: no such file; the message names similar files in that directory.
        IsADirectoryError: ``path`` is a directory (list it with ``os.listdir(path)``).
        ValueError: the file is binary (a NUL byte, or not UTF-8; read bytes with
            ``open(path, 'rb').read()``); or it is over ``MAX_BYTES`` (256 KiB) or ``MAX_LINES``
            (2000 lines) and no range was given (the message gives its size and line count: read
            a range, or ``open(path).read()`` to process it in code); or ``offset`` is past the
            end, or ``offset``/``limit`` is not a positive integer.
        PermissionError: the file cannot be read.

    Examples::

        read("setup.cfg")                      # the whole file
        read("src/app.py", offset=120, limit=40)   # lines 120-159, numbered
        [n for n, line in enumerate(read("log.txt").splitlines(), 1) if "ERROR" in line]
    """
    full = os.path.abspath(os.path.expanduser(os.fspath(path)))
    _check_is_file(full)
    ranged = offset is not None or limit is not None
    first = 1 if offset is None else _positive(offset, "offset")
    count = None if limit is None else _positive(limit, "limit")
    size = os.path.getsize(full)
    with open(full, "rb") as handle:
        head = handle.read(_SNIFF_BYTES)
        _refuse_binary(full, head, 0)
        if not ranged:
            if size > MAX_BYTES:
                raise _too_big(full, size, _count_lines(handle, head))
            data = head + handle.read()
            _refuse_binary(full, data, 0)
            text = _decode(full, data, 0)
            lines = _line_count(text)
            if lines > MAX_LINES:
                raise _too_big(full, size, lines)
            return _Text(text)
        handle.seek(0)
        return _Text(_numbered_range(full, handle, first, count))


def _numbered_range(full, handle, first, count):
    """Lines ``first``..``first+count-1`` of an open binary file, numbered like ``cat -n``."""
    picked = []
    picked_bytes = 0
    number = 0
    for number, raw in enumerate(handle, 1):
        if number < first:
            continue
        if count is not None and number >= first + count:
            break
        if count is None and (len(picked) >= MAX_LINES or picked_bytes >= MAX_BYTES):
            total = number - 1 + sum(1 for _ in handle) + 1
            raise ValueError(
                f"lines {first}- of {full} are {total - first + 1:,} lines, more than read() "
                f"returns without a limit ({MAX_LINES:,} lines or {MAX_BYTES // 1024} KiB). "
                f"Pass one: read({full!r}, offset={first}, limit=200)."
            )
        _refuse_binary(full, raw, number)
        picked.append(f"{number:6}\t{_decode(full, raw, number)}")
        picked_bytes += len(raw)
    if not picked and (first > 1 or number > 0):
        raise ValueError(
            f"offset {first} is past the end of {full}, which has {number:,} lines. "
            f"Read the end with read({full!r}, offset={max(1, number - 19)})."
        )
    return "".join(picked)


def _check_is_file(full):
    if os.path.isdir(full):
        entries = sorted(os.listdir(full))
        shown = ", ".join(entries[:20]) + (", ..." if len(entries) > 20 else "")
        raise IsADirectoryError(
            f"{full} is a directory ({len(entries)} entr{'y' if len(entries) == 1 else 'ies'}: "
            f"{shown or 'empty'}), not a file. "
            f"List it with os.listdir({full!r}) or bash('ls -la {full}')."
        )
    if not os.path.exists(full):
        raise FileNotFoundError(f"No such file: {full}. {_near_names(full)}".rstrip())


def _near_names(full):
    """A hint naming files in the same directory whose names resemble the one asked for."""
    parent, name = os.path.split(full)
    if not os.path.isdir(parent):
        existing = parent
        while existing and not os.path.isdir(existing):
            existing = os.path.dirname(existing)
        return f"The directory {parent} does not exist either (nearest existing: {existing})."
    try:
        entries = os.listdir(parent)
    except OSError:
        return ""  # an unreadable directory: the missing file is still the error to report
    stem = os.path.splitext(name)[0].lower()
    similar = [
        entry
        for entry in entries
        if entry.lower() == name.lower() or os.path.splitext(entry)[0].lower() == stem
    ]
    for entry in difflib.get_close_matches(name, entries, n=5, cutoff=0.6):
        if entry not in similar:
            similar.append(entry)
    if similar:
        return f"Similar names in {parent}: {', '.join(similar[:5])}."
    return (
        f"Nothing similar in {parent} ({len(entries)} entries; "
        f"list them with os.listdir({parent!r}))."
    )


def _positive(value, name):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer (lines count from 1), got {value!r}")
    return value


def _refuse_binary(full, data, line):
    position = data.find(b"\0")
    if position >= 0:
        where = f"line {line}" if line else f"byte {position:,}"
        raise ValueError(
            f"{full} looks binary (a NUL byte at {where}); read() returns text only. "
            f"Read its bytes with open({full!r}, 'rb').read()."
        )


def _decode(full, data, line):
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        where = f"line {line}" if line else f"byte {error.start:,}"
        raise ValueError(
            f"{full} is not UTF-8 text (undecodable byte at {where}). Read its bytes with "
            f"open({full!r}, 'rb').read(), or text in another encoding with "
            f"open({full!r}, encoding='latin-1').read()."
        ) from None


def _line_count(text):
    return text.count("\n") + (1 if text and not text.endswith("\n") else 0)


def _count_lines(handle, head):
    lines = head.count(b"\n")
    last = head[-1:]
    for chunk in iter(lambda: handle.read(1 << 20), b""):
        lines += chunk.count(b"\n")
        last = chunk[-1:]
    return lines + (1 if last and last != b"\n" else 0)


def _too_big(full, size, lines):
    return ValueError(
        f"{full} is {_human(size)} ({lines:,} lines), more than read() returns at once "
        f"({MAX_BYTES // 1024} KiB or {MAX_LINES:,} lines). Read a range: "
        f"read({full!r}, offset=1, limit=200); search it: bash('grep -n PATTERN {full}'); "
        f"or process it in code: open({full!r}).read()."
    )


def _human(size):
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:,} bytes" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"
