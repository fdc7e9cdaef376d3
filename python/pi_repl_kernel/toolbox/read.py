"""pi-repl default helper: ``read``.

A helper file like any user's (see docs/helpers.md); the file handling it shares with ``write``,
``edit`` and ``bash`` is in ``pi_repl_kernel.toolbox_support``.
"""

from pi_repl_kernel import toolbox_support as _io

helper_description = (
    "Numbered lines of a text file (a capped range; says how to continue); images are shown."
)

MAX_LINES = 2000
"""Most lines ``read`` returns in one call (like pi's read)."""

MAX_BYTES = 50 * 1024
"""Most bytes of text ``read`` returns in one call (like pi's read); a single longer line is cut."""

MAX_IMAGE_BYTES = 20 * 1024 * 1024
"""Largest image file ``read`` shows; the display is downscaled to the model's budget anyway."""

_IMAGES = (  # (magic test, MIME type)
    (lambda h: h.startswith(b"\x89PNG\r\n\x1a\n"), "image/png"),
    (lambda h: h.startswith(b"\xff\xd8\xff"), "image/jpeg"),
    (lambda h: h[:6] in (b"GIF87a", b"GIF89a"), "image/gif"),
    (lambda h: h[:4] == b"RIFF" and h[8:12] == b"WEBP", "image/webp"),
)

_BINARY_KINDS = (  # (magic prefix or test, name) for the refusal of other binary files
    (b"\x7fELF", "an ELF executable or library"),
    (b"\x1f\x8b", "gzip-compressed data"),
    (b"PK\x03\x04", "a zip archive (also .jar, .docx, .xlsx, .whl)"),
    (b"%PDF", "a PDF document"),
    (b"SQLite format 3\0", "an SQLite database"),
    (b"BZh", "bzip2-compressed data"),
    (b"\xfd7zXZ\0", "xz-compressed data"),
    (b"\x28\xb5\x2f\xfd", "zstd-compressed data"),
    (b"7z\xbc\xaf\x27\x1c", "a 7-zip archive"),
    (b"\x93NUMPY", "a NumPy array (.npy): np.load it"),
    (b"PAR1", "a Parquet file: pandas.read_parquet it"),
    (b"\x89HDF\r\n\x1a\n", "an HDF5 file"),
    (b"\0asm", "a WebAssembly module"),
    (b"MZ", "a Windows executable"),
    (b"\xca\xfe\xba\xbe", "a Java class or Mach-O universal binary"),
    (b"\xcf\xfa\xed\xfe", "a Mach-O executable"),
    (b"\x80\x04", "a Python pickle"),
    (b"\x80\x05", "a Python pickle"),
    (b"ID3", "an MP3 audio file"),
    (b"OggS", "an Ogg media file"),
    (b"BM", "a BMP image (shown images are PNG, JPEG, GIF and WebP)"),
)


def read(path, offset=None, limit=None):
    """Return numbered lines of the text file at ``path``; show an image file as an image.

    Arguments:
        path: the file; a relative path is resolved against the kernel's current directory
            (the session's), ``~`` is expanded. Any path may be read.
        offset: 1-based number of the first line (default 1). A negative offset counts from the
            end: ``offset=-100`` is the last 100 lines.
        limit: most lines to return (default: up to ``MAX_LINES``).

    Returns a ``str`` (displayed as plain text): each line as ``<number>\\t<text>`` (``cat -n``
    style, line ends removed), at most ``MAX_LINES`` (2000) lines and ``MAX_BYTES`` (50 KiB) of
    text. If the range stops before the end of the file, a last line says so and gives the exact
    call that continues, e.g. ``[Lines 1-2000 of 9,120 shown. Continue: read('log.txt',
    offset=2001)]``. One line longer than the whole budget (minified code) is cut, and says how
    long it is. A file with CRLF line ends says so (``edit`` keeps them).

    An image (PNG, JPEG, GIF, WebP) is displayed to the model like a plot (the MCP layer
    downscales it) and ``read`` returns a line naming its type, size and dimensions.

    To process a whole big file, use code: ``open(path).read()``, ``pathlib.Path(path)``.

    Raises:
        FileNotFoundError: no such file; the message names similar files in that directory.
        IsADirectoryError: a directory (the message lists its entries).
        ValueError: a FIFO, device or socket (never opened for reading, so nothing blocks); a
            binary file that is not an image (the message names the type and size); ``offset``
            past the end (the message gives the line count); a bad ``offset`` or ``limit``.
        PermissionError: the file cannot be read.

    Examples::

        read("setup.cfg")
        read("src/app.py", offset=120, limit=40)   # lines 120-159
        read("server.log", offset=-50)             # the last 50 lines
    """
    full = _io.resolve(path)
    first = 1 if offset is None else _whole(offset, "offset", negative=True)
    count = None if limit is None else _whole(limit, "limit")
    count = MAX_LINES if count is None else min(count, MAX_LINES)
    handle, info = _io.open_regular(full, "read")
    with handle:
        head = _io.sniff(handle)
        kind = next((mime for test, mime in _IMAGES if test(head)), None)
        if kind is not None:
            return _show_image(full, handle, info.st_size, kind)
        if _io.looks_binary(head):
            raise ValueError(_binary_refusal(full, head, info.st_size))
        try:
            lines = _io.read_lines(handle, info.st_size, first, count, MAX_BYTES)
        except ValueError as error:
            raise ValueError(
                f"{full}: {error}. Read its end with read({full!r}, offset=-50)."
            ) from None
    return _io.Text(_format(full, lines, limit))


def _format(full, lines, limit):
    first, last = lines.first, lines.first + len(lines.lines) - 1
    width = max(6, len(str(last)))
    body = "\n".join(f"{n:{width}}\t{text}" for n, text in enumerate(lines.lines, first))
    notes = []
    if lines.cut == "long line":
        notes.append(
            f"[Line {first} is {_io.human_size(lines.line_bytes)}, over the "
            f"{MAX_BYTES // 1024} KiB read() returns: only its start is shown. In code: "
            f"open({full!r}).read().splitlines()[{first - 1}][start:end]]"
        )
    if lines.total == 0:
        return f"[{full} is empty]"
    if last < lines.total:
        why = ""
        if lines.cut == "bytes":
            why = f" ({MAX_BYTES // 1024} KiB limit)"
        elif lines.cut is None and (limit is None or limit > MAX_LINES):
            why = f" ({MAX_LINES:,} line limit)"
        notes.append(
            f"[Lines {first:,}-{last:,} of {lines.total:,} shown{why}. "
            f"Continue: read({full!r}, offset={last + 1})]"
        )
    if lines.crlf:
        notes.append("[CRLF line endings; edit() matches and keeps them]")
    return body + ("\n\n" + "\n".join(notes) if notes else "")


def _show_image(full, handle, size, mime):
    size_text = _io.human_size(size)
    if size > MAX_IMAGE_BYTES:
        raise ValueError(
            f"{full} is a {mime} image of {size_text}, over the {MAX_IMAGE_BYTES >> 20} MiB "
            f"read() shows. Downscale it first (e.g. with PIL) and display the result."
        )
    data = handle.read()
    if mime in ("image/gif", "image/webp"):
        data, mime = _as_png(full, data, mime, size_text)
    from IPython.display import Image, display  # the kernel's display path, as for plots

    display(Image(data=data, format=mime.split("/")[1]))
    dims = _dimensions(data, mime)
    return _io.Text(
        f"Read image file {full} [{mime}, {size_text}{f', {dims}' if dims else ''}]: "
        f"shown as an image."
    )


def _as_png(full, data, mime, size_text):
    try:
        import io

        from PIL import Image
    except ImportError:
        raise ValueError(
            f"{full} is a {mime} image ({size_text}); images are shown as PNG or JPEG and "
            f"converting {mime} needs Pillow, which this kernel lacks (pip install pillow)."
        ) from None
    with Image.open(io.BytesIO(data)) as image:
        out = io.BytesIO()
        image.convert("RGBA").save(out, format="PNG")
    return out.getvalue(), "image/png"


def _dimensions(data, mime):
    if mime == "image/png" and len(data) >= 24:
        return f"{int.from_bytes(data[16:20], 'big')}x{int.from_bytes(data[20:24], 'big')}"
    if mime == "image/jpeg":
        index = 2
        while index + 9 < len(data) and data[index] == 0xFF:
            marker = data[index + 1]
            length = int.from_bytes(data[index + 2 : index + 4], "big")
            if marker in (0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD):
                height = int.from_bytes(data[index + 5 : index + 7], "big")
                width = int.from_bytes(data[index + 7 : index + 9], "big")
                return f"{width}x{height}"
            index += 2 + length
    return ""


def _binary_refusal(full, head, size):
    kind = "binary data"
    for magic, name in _BINARY_KINDS:
        if head.startswith(magic):
            kind = name
            break
    else:
        if len(head) > 262 and head[257:262] == b"ustar":
            kind = "a tar archive"
        elif head[4:8] == b"ftyp":
            kind = "an MP4/MOV media file"
        elif b"\0" not in head:
            kind = "not UTF-8 text (another encoding?)"
    return (
        f"{full} is {kind} ({_io.human_size(size)}), not text; read() returns text and shows "
        f"images only. Bytes: open({full!r}, 'rb').read(); text in another encoding: "
        f"open({full!r}, encoding='latin-1').read(); what it is: bash('file {full}')."
    )


def _whole(value, name, negative=False):
    if isinstance(value, bool) or not isinstance(value, int) or value == 0:
        ok = False
    else:
        ok = value > 0 or negative
    if not ok:
        extra = " (negative counts from the end)" if negative else ""
        raise ValueError(
            f"{name} must be a {'non-zero' if negative else 'positive'} integer{extra}; lines "
            f"count from 1; got {value!r}"
        )
    return value
