"""One notebook cell as a reader sees it, from either side of the comparison.

``jupyter_cell`` lays out what a Jupyter client got for a cell (its outputs and its
``execute_reply``) the way docs/mcp.md says pi-repl's text reads: stdout, the ``[stderr]``
block, rich outputs (an image has no text: it is counted), the result, the traceback.
``mcp_cell`` reads pi-repl's ``execute`` result: its text (without the caption of a
downscaled image), its image blocks and its machine-readable outcome.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07]*\x07")

MAX_IMAGES_SHOWN = 4
"""`pi-repl mcp`'s default `--image-max-count`: more images in one cell are saved and listed."""


def strip_ansi(text: str) -> str:
    return ANSI.sub("", text)


@dataclass
class Cell:
    """What one run produced for one code cell."""

    status: str
    """`ok` or `error` (pi-repl's `aborted` and `died` never match Jupyter's)."""
    ename: str | None
    number: int | None
    """Jupyter's execution count, or the result's `cell` in pi-repl."""
    images: int
    """All images the cell produced, shown or not."""
    text: str
    """The cell as text, in pi-repl's layout; not yet normalised."""
    pager: list[str] = field(default_factory=list)
    """Jupyter only: the pager payloads of the execute reply (`obj?`, `%prun`)."""
    input_refused: bool = False
    truncated: bool = False
    """pi-repl only: some channel was cut at the output cap."""


def plain_of(data: dict) -> str | None:
    plain = data.get("text/plain")
    if isinstance(plain, list):
        plain = "".join(plain)
    return plain


def reads_as_plain(data: dict) -> bool:
    """A rich output reads as its `text/plain` when it has nothing else, or when that text says
    more than a bare type name like `<IPython.core.display.HTML object>` (issue 22)."""
    plain = plain_of(data)
    if plain is None:
        return False
    bare = plain.strip()
    is_bare = bare.startswith("<") and bare.endswith(">") and "\n" not in bare
    return all(mime == "text/plain" for mime in data) or not is_bare


def describe_display(data: dict) -> str:
    """A non-image rich output as pi-repl's text must show it (docs/mcp.md, item 4): the source
    of Markdown and LaTeX (what a notebook shows; a model reads them as they are), its
    `text/plain` when that says something, the text of HTML, a line for SVG."""
    if "text/markdown" in data:
        return _joined(data["text/markdown"]).rstrip("\n")
    if "text/latex" in data:
        return _joined(data["text/latex"]).rstrip("\n")
    if reads_as_plain(data):
        return plain_of(data)
    if "image/svg+xml" in data:
        return "[SVG image]"
    if "text/html" in data:
        return "[HTML output]\n" + text_of_html(_joined(data["text/html"]))
    if plain_of(data) is not None:
        return plain_of(data)
    return f"[{', '.join(data)} output]"


def _joined(value) -> str:
    return "".join(value) if isinstance(value, list) else value


def text_of_html(html: str) -> str:
    html = re.sub(r"(?is)<style.*?</style>|<script.*?</script>", " ", html)
    visible = " ".join(re.sub(r"<[^>]*>", " ", html).split())
    return visible[:600] + (" …" if len(visible) > 600 else "")


def is_image(data: dict) -> bool:
    return "image/png" in data or "image/jpeg" in data


def as_terminal_shows(text: str) -> str:
    """Stream text as a terminal (and JupyterLab) shows it: ``\\r`` back to the line's start,
    ``\\b`` one column back, ``ESC[K`` erase to the end of the line (pi-repl renders the same,
    in src/terminal_text.rs, where the rest of a terminal's moves are handled too)."""
    lines, row, col = [[]], 0, 0
    for piece in re.split(r"(\x1b\[[0-9;]*[A-Za-z]|[\r\n\b])", text):
        if piece == "\n":
            row, col = row + 1, 0
            if row == len(lines):
                lines.append([])
        elif piece == "\r":
            col = 0
        elif piece == "\b":
            col = max(0, col - 1)
        elif piece.startswith("\x1b["):
            if piece[-1] == "K":
                del lines[row][col:]
        else:
            line = lines[row]
            for ch in piece:
                line.extend(" " * (col - len(line)))
                if col < len(line):
                    line[col] = ch
                else:
                    line.append(ch)
                col += 1
    return "\n".join("".join(line) for line in lines)


def jupyter_cell(cell, reply: dict) -> Cell:
    """Renders what Jupyter got for one cell in the layout of pi-repl's text."""
    stdout, stderr, rich, errors = [], [], [], []
    result = None
    for output in cell.outputs:
        kind = output.output_type
        if kind == "stream":
            (stdout if output.name == "stdout" else stderr).append(output.text)
        elif kind == "display_data":
            rich.append(output.data)
        elif kind == "execute_result":
            result = output.data
        elif kind == "error":
            errors.append(output)
    parts = []
    if as_terminal_shows("".join(stdout)):
        parts.append(as_terminal_shows("".join(stdout)).rstrip("\n"))
    if as_terminal_shows("".join(stderr)):
        parts.append("[stderr]\n" + as_terminal_shows("".join(stderr)).rstrip("\n"))
    images, hidden = 0, 0
    result_shown = False
    for data in rich + ([result] if result is not None else []):
        if is_image(data):
            if images >= MAX_IMAGES_SHOWN:
                hidden += 1  # IMAGE_CAP
                continue
            images += 1  # the image itself, no text
        elif data is not result or not reads_as_plain(data):
            result_shown |= data is result
            parts.append(describe_display(data))
    if hidden:
        parts.append(f"[{hidden} more image(s) not shown]")
    if result is not None and not result_shown and plain_of(result) is not None:
        parts.append(plain_of(result))
    for error in errors:
        traceback = [strip_ansi(frame) for frame in error.traceback]
        if traceback:
            parts.append("\n".join(traceback))
        else:
            parts.append(f"{error.ename}: {error.evalue}")
    content = reply.get("content", {})
    status = content.get("status", "error")
    ename = errors[-1].ename if errors else content.get("ename")
    pager = [
        strip_ansi(_joined(payload["data"]["text/plain"]))
        for payload in content.get("payload", [])
        if payload.get("source") == "page" and "text/plain" in payload.get("data", {})
    ]
    return Cell(
        status=status,
        ename=ename if status == "error" else None,
        number=content.get("execution_count"),
        images=images + hidden,
        text="\n".join(parts) if parts else "(no output)",
        pager=pager,
        input_refused=any(e.ename == "StdinNotImplementedError" for e in errors),
    )


def mcp_cell(result: dict) -> Cell:
    """What `pi-repl mcp` answered for one cell."""
    content = result.get("content", [])
    text = content[0]["text"] if content and content[0].get("type") == "text" else ""
    # The machine-readable outcome is `_meta["pi-repl/outcome"]`; builds before issue 9 sent
    # it as `structuredContent`.
    meta = result.get("_meta") or {}
    outcome = meta.get("pi-repl/outcome") or result.get("structuredContent") or {}
    error = outcome.get("error") or {}
    shown = sum(1 for block in content if block.get("type") == "image")
    hidden = re.search(r"\[(\d+) more image\(s\) not shown", text)
    # A downscaled image's caption (its sizes, its original's file) has no Jupyter twin: the
    # images are compared by count.
    text = re.sub(r"(?m)^\[image \d+: downscaled [^\]\n]*\]\n?", "", text)
    # What clear_output() removed, said in one line; Jupyter removes it silently.
    text = re.sub(r"^\[pi-repl: clear_output\(\) ran [^\n]*\]\n?", "", text)
    text = re.sub(
        r"\[(\d+) more image\(s\) not shown[^\]\n]*\]", r"[\1 more image(s) not shown]", text
    )
    text = re.sub(r"\[SVG image, [^\]\n]*\]", "[SVG image]", text)
    text = re.sub(r"\[HTML output, [^\]\n]*\]", "[HTML output]", text)
    return Cell(
        status=outcome.get("status", "error" if result.get("isError") else "ok"),
        ename=error.get("ename"),
        number=outcome.get("cell"),
        images=shown + (int(hidden.group(1)) if hidden else 0),
        text=text,
        input_refused=error.get("ename") == "StdinNotImplementedError",
        truncated=bool(outcome.get("truncated")),
    )
