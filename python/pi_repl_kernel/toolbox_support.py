"""The default toolbox's one I/O core: what ``read``, ``write``, ``edit`` and ``bash`` share.

The toolbox files (``toolbox/*.py``) are helper files like the ones users write, each loaded in
its own module; everything more than one of them needs is here, once:

- path resolution (``resolve``) and the write policy (``check_write_allowed``): reads go
  anywhere; writes only inside the allowed roots (the session's working directory and
  ``$PI_REPL_ALLOW_WRITE``), with symbolic links resolved before the check;
- the regular-file check (``open_regular``): FIFOs, devices, sockets and directories are refused
  with a clear error before anything could block on them; missing files name similar names;
- capped text reading (``read_lines``: a numbered range of lines within a line and byte budget,
  without loading the file; ``read_text``: a whole UTF-8 file for ``edit``);
- the atomic writer (``replace_file``): the snapshot store's temp-write-fsync-rename
  (``snapshot_blobs.write_then_rename``), keeping the replaced file's mode, owner and extended
  attributes (which on Linux carry POSIX ACLs and SELinux labels);
- ``Text``, a ``str`` that displays as itself.
"""

import difflib
import os
import stat

from pi_repl_kernel.snapshot import blobs as snapshot_blobs

ALLOW_WRITE_ENV = "PI_REPL_ALLOW_WRITE"
"""Environment variable naming more directories writes may go to (``:``-separated), or ``*``."""

SESSION_ROOT = os.getcwd()
"""The kernel's working directory when the toolbox was loaded (at kernel start): the project."""

_CHUNK = 1 << 20  # bytes read at a time when scanning a file for line breaks
_SNIFF_BYTES = 8192  # head of a file checked for NUL bytes and UTF-8 before it is read as text


def resolve(path):
    """``path`` as an absolute path: ``~`` expanded, a relative path taken from the current
    directory (the kernel's, which is the session's unless a cell changed it)."""
    return os.path.abspath(os.path.expanduser(os.fspath(path)))


def allowed_roots():
    """Real paths of the directories writes may go to, or None when ``*`` allows anywhere."""
    roots = [SESSION_ROOT]
    for entry in os.environ.get(ALLOW_WRITE_ENV, "").split(os.pathsep):
        entry = entry.strip()
        if entry == "*":
            return None
        if entry:
            roots.append(os.path.expanduser(entry))
    return [os.path.realpath(root) for root in roots]


def check_write_allowed(full, verb):
    """Return the real path ``full`` writes to, or raise PermissionError if it is outside the
    allowed roots. Symbolic links (of the file and of its directories) are resolved first, so a
    link inside the project pointing outside it is refused too."""
    target = os.path.realpath(full)
    roots = allowed_roots()
    if roots is None:
        return target
    for root in roots:
        if target == root or target.startswith(root.rstrip(os.sep) + os.sep):
            return target
    via = f" ({full} resolves to it through a symbolic link)" if target != full else ""
    suggestion = os.path.dirname(target)
    raise PermissionError(
        f"{verb}() refused: {target}{via} is outside the directories this session may write "
        f"({', '.join(roots)}). Writes are limited to the session's working directory and "
        f"${ALLOW_WRITE_ENV}. To allow this one, set {ALLOW_WRITE_ENV}={suggestion} "
        f"(':'-separated directories, or '*' for anywhere) in pi-repl's environment, or in this "
        f"kernel: os.environ[{ALLOW_WRITE_ENV!r}] = {suggestion!r}."
    )


def open_regular(full, verb):
    """Open ``full`` for reading if it is a regular file: ``(binary file object, stat)``.

    Raises FileNotFoundError (naming similar names), IsADirectoryError (listing the entries) or
    ValueError (a FIFO, device or socket, named as such) before opening anything that could
    block; the type is checked again on the open descriptor, so a swap in between cannot block.
    """
    try:
        info = os.stat(full)
    except FileNotFoundError:
        raise FileNotFoundError(f"No such file: {full}. {near_names(full)}".rstrip()) from None
    _refuse_irregular(full, info, verb)
    fd = os.open(full, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        info = os.fstat(fd)
        _refuse_irregular(full, info, verb)
        return os.fdopen(fd, "rb"), info
    except BaseException:
        os.close(fd)
        raise


_KINDS = (
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _refuse_irregular(full, info, verb):
    if stat.S_ISREG(info.st_mode):
        return
    if stat.S_ISDIR(info.st_mode):
        try:
            entries = sorted(os.listdir(full))
        except OSError:
            entries = []
        shown = ", ".join(entries[:20]) + (", ..." if len(entries) > 20 else "")
        raise IsADirectoryError(
            f"{full} is a directory ({len(entries)} entr{'y' if len(entries) == 1 else 'ies'}: "
            f"{shown or 'empty'}), not a file. "
            f"List it with os.listdir({full!r}) or bash('ls -la {full}')."
        )
    kind = next((name for test, name in _KINDS if test(info.st_mode)), "not a regular file")
    raise ValueError(
        f"{full} is {kind}, not a regular file; {verb}() works on regular files only (it would "
        f"block, or consume what it reads). Use it in code if you mean to: open({full!r}, 'rb')."
    )


def near_names(full):
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


def sniff(handle):
    """The first bytes of an open file (the position is restored to 0)."""
    handle.seek(0)
    head = handle.read(_SNIFF_BYTES)
    handle.seek(0)
    return head


def looks_binary(head):
    """True if ``head`` (a file's first bytes) is not UTF-8 text: a NUL byte, or bytes that do
    not decode (a multi-byte character cut at the end of ``head`` is fine)."""
    if b"\0" in head:
        return True
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as error:
        return error.start < len(head) - 3
    return False


class Lines:
    """A range of a file's lines: ``first`` (1-based), ``lines`` (decoded, line ends removed),
    ``total`` (lines in the file), ``cut`` (why the range stopped early: None, ``"bytes"`` or
    ``"long line"``), ``line_bytes`` (size of a line cut because it alone is over the budget)
    and ``crlf`` (the range's lines end with CRLF)."""

    def __init__(self, first, lines, total, cut, line_bytes, crlf):
        self.first, self.lines, self.total = first, lines, total
        self.cut, self.line_bytes, self.crlf = cut, line_bytes, crlf


def read_lines(handle, size, offset, limit, max_bytes):
    """Lines of an open binary file: from ``offset`` (1-based; negative counts from the end),
    at most ``limit`` of them and ``max_bytes`` of text. The file is scanned in 1 MiB chunks
    (line breaks counted in C), never loaded whole; only the returned range is decoded.

    Raises ValueError if a positive ``offset`` is past the end (the message gives the count).
    """
    if offset < 0:
        total = count_lines(handle, size)
        offset = max(1, total + offset + 1)
        start = _line_start_from_end(handle, size, total - offset + 1)
    else:
        total, start = _count_and_find(handle, size, offset)
    if offset > max(total, 1):
        raise ValueError(f"offset {offset} is past the end: the file has {total:,} lines")
    handle.seek(start)
    wanted = total - offset + 1 if limit is None else min(limit, total - offset + 1)
    data = bytearray()
    while data.count(b"\n") < wanted and len(data) <= max_bytes:
        chunk = handle.read(min(_CHUNK, max_bytes + 1 - len(data) + 4096))
        if not chunk:
            break
        data += chunk
    raw = bytes(data).split(b"\n")
    if len(raw) > wanted:
        raw = raw[:wanted]
    elif raw and raw[-1] == b"" and len(raw) > 1:
        raw.pop()  # the file's last line break
    picked, used, cut, line_bytes = [], 0, None, 0
    for line in raw:
        if used + len(line) + 1 > max_bytes:
            if not picked:  # one line over the whole budget: show its head
                line_bytes = _line_length(handle, start)
                picked.append(line[:max_bytes])
                cut = "long line"
            else:
                cut = "bytes"
            break
        picked.append(line)
        used += len(line) + 1
    crlf = any(line.endswith(b"\r") for line in picked)
    lines = [
        (line[:-1] if line.endswith(b"\r") else line).decode("utf-8", "replace")
        for line in picked
    ]
    return Lines(offset, lines, total, cut, line_bytes, crlf)


def count_lines(handle, size):
    """Lines in an open binary file: line breaks, plus one for a last line without one."""
    handle.seek(0)
    breaks = 0
    last = b""
    for chunk in iter(lambda: handle.read(_CHUNK), b""):
        breaks += chunk.count(b"\n")
        last = chunk[-1:]
    return breaks + (1 if size and last != b"\n" else 0)


def _count_and_find(handle, size, number):
    """One pass: ``(lines in the file, byte offset where line number starts)``."""
    handle.seek(0)
    position, seen, start, last = 0, 1, None, b""
    for chunk in iter(lambda: handle.read(_CHUNK), b""):
        here = chunk.count(b"\n")
        if start is None and seen + here >= number:
            index = -1
            for _ in range(number - seen):
                index = chunk.index(b"\n", index + 1)
            start = position + index + 1
        seen += here
        position += len(chunk)
        last = chunk[-1:]
    total = seen - 1 + (1 if size and last != b"\n" else 0)
    return total, position if start is None else start


def _line_start_from_end(handle, size, lines):
    """Byte offset where the last ``lines`` lines start, reading backwards from the end."""
    end = size
    handle.seek(max(0, size - 1))
    if size and handle.read(1) == b"\n":
        end -= 1  # the last line's own line break does not start another line
    breaks, position = 0, end
    while position > 0:
        step = min(_CHUNK, position)
        handle.seek(position - step)
        chunk = handle.read(step)
        index = len(chunk)
        while True:
            index = chunk.rfind(b"\n", 0, index)
            if index < 0:
                break
            breaks += 1
            if breaks == lines:
                return position - step + index + 1
        position -= step
    return 0


def _line_length(handle, start):
    """Bytes of the line starting at ``start`` (without its line break)."""
    handle.seek(start)
    length = 0
    for chunk in iter(lambda: handle.read(_CHUNK), b""):
        end = chunk.find(b"\n")
        if end >= 0:
            return length + end
        length += len(chunk)
    return length


def read_text(full, verb):
    """The whole text of a regular UTF-8 file, and its stat. Refuses binary files clearly."""
    handle, info = open_regular(full, verb)
    with handle:
        data = handle.read()
    if b"\0" in data:
        raise ValueError(f"{full} looks binary (it contains NUL bytes); {verb}() changes text only")
    try:
        return data.decode("utf-8"), info
    except UnicodeDecodeError as error:
        raise ValueError(
            f"{full} is not UTF-8 text (undecodable byte at {error.start:,}); "
            f"{verb}() changes UTF-8 files only"
        ) from None


def replace_file(target, data, mode, like=None):
    """Atomically replace (or create) ``target`` with ``data``: the snapshot store's writer
    (temp file beside it, fsync, rename), then the directory is fsynced.

    The new file gets ``mode``; when ``like`` (the replaced file's ``os.stat_result``) is given
    it also gets that file's owner and group (when this process may set them) and its extended
    attributes (``user.*``, and the ``system.posix_acl_*`` ACLs and ``security.*`` labels where
    permitted). Returns the names of what could not be kept (empty when everything was).
    """
    lost = []
    xattrs = _xattrs(target) if like is not None else {}

    def keep_metadata(fd):
        if like is not None and (like.st_uid, like.st_gid) != (os.getuid(), os.getgid()):
            try:
                os.fchown(fd, like.st_uid, like.st_gid)
            except OSError:
                lost.append("owner")
        for name, value in xattrs.items():
            try:
                os.setxattr(fd, name, value)
            except OSError:
                lost.append(f"xattr {name}")
        os.fchmod(fd, mode)  # after fchown, which may clear set-id bits

    name = os.path.basename(target)
    snapshot_blobs.write_then_rename(data, target, f".{name}.tmp-", before_rename=keep_metadata)
    try:
        snapshot_blobs.fsync_dir(os.path.dirname(target))
    except OSError:
        pass  # some filesystems cannot fsync a directory; the rename itself has happened
    return lost


def _xattrs(path):
    if not hasattr(os, "listxattr"):
        return {}  # macOS: Python has no xattr calls; mode and owner are still kept
    try:
        return {name: os.getxattr(path, name) for name in os.listxattr(path)}
    except OSError:
        return {}


def umask():
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


def human_size(size):
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:,} bytes" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"


class Text(str):
    """A plain ``str`` that IPython displays as the text itself, not as a quoted repr."""

    def _repr_pretty_(self, printer, cycle):
        printer.text(str(self))

    def __reduce__(self):
        return (str, (str(self),))  # pickles (and snapshots) as a plain str
