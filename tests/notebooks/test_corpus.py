"""Every notebook of the corpus, run through a real Jupyter client and through `pi-repl mcp`,
compared cell by cell (issue 9, Jupyter fidelity).

For each notebook in ``corpus/`` the same test runs every code cell, in order:

- through **nbclient** against a real ipykernel in this interpreter's environment (what
  Jupyter shows), also keeping each ``execute_reply`` for its pager payloads (``obj?``);
- through the **real binary**, ``pi-repl mcp --python <this interpreter>``, spoken to as an MCP
  client over stdio (``initialize``, ``notifications/initialized``, ``tools/list``, then one
  ``tools/call execute`` per code cell).

The Jupyter outputs are rendered the way ``docs/mcp.md`` says a cell's text reads (stdout, the
``[stderr]`` block, rich outputs, the result, the traceback), both texts are normalised
(addresses, timings, temp paths, the kernel's cell file names) and compared, together with the
status, the error name, the cell number and the number of images. The differences that are
design decisions are listed once, in ``EXPECTED_DIFFERENCES``, each with its reason (and in
README.md); any other difference fails with the notebook, the cell and the first differing
lines.

Both runs get the same environment: matplotlib's inline backend (a headless Agg renderer whose
figures arrive as ``image/png`` display data, as in any notebook), one IPYTHONDIR whose startup
file seeds ``random`` and ``numpy.random`` (the corpus draws random data), and a fixed
PYTHONHASHSEED. Each run has its own empty working directory.
"""

from __future__ import annotations

import difflib
import json
import os
import queue
import re
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

CORPUS = Path(__file__).parent / "corpus"
REPO = Path(__file__).resolve().parents[2]

KERNEL_START_TIMEOUT_S = 180
"""Bound on the wait for a kernel (either run) to start on a busy machine."""

CELL_TIMEOUT_S = 300
"""Bound on the wait for one cell's result (a guard against a hang, not a timing assertion)."""

SERVER_EXIT_TIMEOUT_S = 30
"""Bound on the wait for `pi-repl mcp` to exit once its stdin is closed."""

MCP_PROTOCOL_VERSION = "2025-06-18"

MAX_IMAGES_SHOWN = 4
"""`pi-repl mcp`'s default `--image-max-count`: more images in one cell are saved and listed."""

INLINE_BACKEND = "module://matplotlib_inline.backend_inline"

SEED_STARTUP = """\
def _pi_repl_corpus_seed():
    import random
    import numpy
    random.seed(0)
    numpy.random.seed(0)
_pi_repl_corpus_seed()
del _pi_repl_corpus_seed
"""


# ---------------------------------------------------------------------------------------------
# The differences that are design decisions. Nothing else may differ.
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Expected:
    """A documented difference: where it applies, and what of the cell is still compared."""

    name: str
    reason: str


INPUT_REFUSED = Expected(
    "input() is refused",
    "Nobody can type into an agent's cell: pi-repl answers input(), getpass() and the "
    "debugger's prompt (%debug, %pdb) at once with its own StdinNotImplementedError message, "
    "where a Jupyter client that allows no stdin gets ipykernel's. The traceback of the "
    "refusal (its frames and message) is not compared; status, error name and everything the "
    "cell printed before it are.",
)

OUTPUT_CAP = Expected(
    "output cap",
    "pi-repl keeps the head and tail of a channel over --max-output characters and names the "
    "file holding all of it, so a cut channel is not compared past what both show.",
)

IMAGE_CAP = Expected(
    "image cap",
    f"pi-repl shows at most {MAX_IMAGES_SHOWN} images per call (--image-max-count) and lists "
    "the rest as saved files: the expected text says so in its place.",
)

CLEAR_OUTPUT_KEEPS_TEXT = Expected(
    "clear_output keeps printed text",
    "clear_output() replaces a cell's rich outputs in pi-repl but keeps the text already "
    "printed, because a model may need it (docs: src/execution.rs). Jupyter erases both. The "
    "expected text keeps the streams printed before clear_output().",
)

EXPECTED_DIFFERENCES = [INPUT_REFUSED, OUTPUT_CAP, IMAGE_CAP, CLEAR_OUTPUT_KEEPS_TEXT]


# ---------------------------------------------------------------------------------------------
# Normalisation: what is nondeterministic between two runs of the same notebook.
# ---------------------------------------------------------------------------------------------

ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07]*\x07")
TIME_UNIT = r"(?:ns|µs|μs|us|ms|s|sec|seconds|min)"


def strip_ansi(text: str) -> str:
    return ANSI.sub("", text)


def normalise(text: str, paths: dict[str, str]) -> str:
    text = strip_ansi(text)
    for path, name in paths.items():
        text = text.replace(path, name)
    # The kernel's file for a cell's code: /tmp/ipykernel_<pid>/<hash>.py, or just <hash>.py.
    text = re.sub(r"/[\w./-]*?ipykernel_\d+/\d+\.py", "<cell file>", text)
    text = re.sub(r"\b\d{6,}\.py\b", "<cell file>", text)
    text = re.sub(r"\bipykernel_\d+\b", "ipykernel_<pid>", text)
    text = re.sub(r"0x[0-9a-fA-F]+", "0x…", text)
    # Timings: %time, %timeit, %prun and the like.
    text = re.sub(rf"\d+(?:\.\d+)?(?:e[-+]?\d+)?\s?{TIME_UNIT}\b", "<time>", text)
    text = re.sub(r"(?m)^(\s*\d+(?:/\d+)?)((?:\s+\d+\.\d+){4})", _prun_row, text)
    text = re.sub(r"in \d+\.\d+ seconds", "in <time> seconds", text)
    text = re.sub(r"(?m)[ \t]+$", "", text)
    return text


def _prun_row(match: re.Match) -> str:
    """A profiler row `ncalls tottime percall cumtime percall`: the counts stay, times go."""
    return match.group(1) + "  <times>"


# ---------------------------------------------------------------------------------------------
# One cell as a reader sees it.
# ---------------------------------------------------------------------------------------------


@dataclass
class Cell:
    status: str  # "ok" or "error"
    ename: str | None
    number: int | None
    images: int
    text: str
    pager: list[str] = field(default_factory=list)
    input_refused: bool = False
    truncated: bool = False


def plain_of(data: dict) -> str | None:
    plain = data.get("text/plain")
    if isinstance(plain, list):
        plain = "".join(plain)
    return plain


def describe_display(data: dict) -> str:
    """A non-image rich output as pi-repl's text shows it (docs/mcp.md, item 4)."""
    plain = plain_of(data)
    others = [mime for mime in data if mime != "text/plain"]
    if plain is not None and (not others or not plain.startswith("<")):
        return plain
    if "text/markdown" in data:
        return _joined(data["text/markdown"])
    if "text/latex" in data:
        return _joined(data["text/latex"])
    if "image/svg+xml" in data:
        return "[SVG image]"
    if "text/html" in data:
        return "[HTML output]\n" + text_of_html(_joined(data["text/html"]))
    return f"[{', '.join(data)} output]"


def _joined(value) -> str:
    return "".join(value) if isinstance(value, list) else value


def text_of_html(html: str) -> str:
    html = re.sub(r"(?is)<style.*?</style>|<script.*?</script>", " ", html)
    visible = " ".join(re.sub(r"<[^>]*>", " ", html).split())
    return visible[:600] + (" …" if len(visible) > 600 else "")


def is_image(data: dict) -> bool:
    return "image/png" in data or "image/jpeg" in data


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
    if stdout and "".join(stdout).rstrip("\n"):
        parts.append("".join(stdout).rstrip("\n"))
    if stderr and "".join(stderr).rstrip("\n"):
        parts.append("[stderr]\n" + "".join(stderr).rstrip("\n"))
    images, hidden = 0, 0
    for data in rich + ([result] if result is not None else []):
        if is_image(data):
            if images >= MAX_IMAGES_SHOWN:
                hidden += 1  # IMAGE_CAP
                continue
            images += 1
            parts.append("[image]")
        elif data is not result:
            parts.append(describe_display(data))
    if hidden:
        parts.append(f"[{hidden} more image(s) not shown]")
    if result is not None and plain_of(result) is not None:
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
    # The lead moves the machine-readable outcome to `_meta`; older builds had it as
    # `structuredContent`.
    meta = result.get("_meta") or {}
    outcome = meta.get("pi-repl/outcome") or result.get("structuredContent") or {}
    error = outcome.get("error") or {}
    shown = sum(1 for block in content if block.get("type") == "image")
    hidden = re.search(r"\[(\d+) more image\(s\) not shown", text)
    # An image's line names its size and saved file: only its place is compared.
    text = re.sub(r"\[image \d+: [^\]\n]*\]", "[image]", text)
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


# ---------------------------------------------------------------------------------------------
# The two runs.
# ---------------------------------------------------------------------------------------------


def code_cells(notebook) -> list[tuple[int, str]]:
    """(index in the notebook, source) of each code cell Jupyter would run."""
    return [
        (index, cell.source)
        for index, cell in enumerate(notebook.cells)
        if cell.cell_type == "code" and cell.source.strip()
    ]


class TextKeepingClient(NotebookClient):
    """nbclient, except that clear_output() keeps printed text (CLEAR_OUTPUT_KEEPS_TEXT)."""

    def clear_output(self, outs, msg, cell_index):
        if msg["content"].get("wait"):
            self.clear_rich_before_next_output = True
            return
        self._clear_rich(outs, cell_index)

    def output(self, outs, msg, display_id, cell_index):
        if getattr(self, "clear_rich_before_next_output", False):
            self._clear_rich(outs, cell_index)
            self.clear_rich_before_next_output = False
        return super().output(outs, msg, display_id, cell_index)

    def _clear_rich(self, outs, cell_index):
        outs[:] = [out for out in outs if out.output_type == "stream"]
        self.clear_display_id_mapping(cell_index)


def run_in_jupyter(path: Path, cwd: Path) -> dict[int, Cell]:
    notebook = nbformat.read(path, as_version=4)
    replies: dict[int, dict] = {}

    def keep_reply(cell, cell_index, execute_reply):
        replies[cell_index] = execute_reply

    client = TextKeepingClient(
        notebook,
        allow_errors=True,
        timeout=CELL_TIMEOUT_S,
        startup_timeout=KERNEL_START_TIMEOUT_S,
        kernel_name="python3",
        resources={"metadata": {"path": str(cwd)}},
        on_cell_executed=keep_reply,
    )
    client.execute()
    return {
        index: jupyter_cell(notebook.cells[index], replies[index])
        for index, _ in code_cells(notebook)
    }


class McpServer:
    """`pi-repl mcp` as a child process, spoken to in newline-delimited JSON-RPC."""

    def __init__(self, binary: Path, home: Path, cwd: Path, log: Path):
        self.log = log.open("wb")
        self.process = subprocess.Popen(
            [str(binary), "mcp", "--python", sys.executable, "--cwd", str(cwd)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            env={**os.environ, "PI_REPL_HOME": str(home)},
        )
        self.messages: queue.Queue = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self.next_id = 0

    def _read(self):
        for line in self.process.stdout:
            self.messages.put(json.loads(line))
        self.messages.put(None)

    def send(self, message: dict):
        self.process.stdin.write(json.dumps(message).encode() + b"\n")
        self.process.stdin.flush()

    def request(self, method: str, params: dict, timeout: float) -> dict:
        self.next_id += 1
        request_id = self.next_id
        self.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        while True:
            try:
                message = self.messages.get(timeout=timeout)
            except queue.Empty:
                raise AssertionError(
                    f"no answer to {method} within {timeout} s; log: {self.log.name}"
                ) from None
            if message is None:
                raise AssertionError(f"pi-repl mcp closed stdout; its log: {self.log.name}")
            if message.get("id") == request_id and "method" not in message:
                if "error" in message:
                    raise AssertionError(f"{method} failed: {message['error']}")
                return message["result"]

    def close(self):
        self.process.stdin.close()
        try:
            self.process.wait(timeout=SERVER_EXIT_TIMEOUT_S)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()
            self.log.close()


def run_in_pi_repl(path: Path, binary: Path, home: Path, cwd: Path) -> tuple[dict[int, Cell], str]:
    notebook = nbformat.read(path, as_version=4)
    server = McpServer(binary, home, cwd, home.parent / "pi-repl-mcp.log")
    cells = {}
    try:
        server.request(
            "initialize",
            {
                "protocolVersion": MCP_PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "pi-repl-notebook-corpus", "version": "0"},
            },
            KERNEL_START_TIMEOUT_S,
        )
        server.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        tools = server.request("tools/list", {}, KERNEL_START_TIMEOUT_S)
        assert [tool["name"] for tool in tools["tools"]] == ["execute"], tools
        for index, source in code_cells(notebook):
            result = server.request(
                "tools/call",
                {"name": "execute", "arguments": {"code": source}},
                CELL_TIMEOUT_S,
            )
            cells[index] = mcp_cell(result)
    finally:
        server.close()
    return cells, server.log.name


# ---------------------------------------------------------------------------------------------
# The comparison.
# ---------------------------------------------------------------------------------------------


def compare(notebook: str, index: int, source: str, jupyter: Cell, mcp: Cell, paths) -> list[str]:
    """The differences of one cell that no documented reason explains, readably."""
    problems = []
    where = f"{notebook}, cell {index}"
    first_line = source.strip().splitlines()[0][:70]
    if (jupyter.status, jupyter.ename) != (mcp.status, mcp.ename):
        problems.append(
            f"status: Jupyter {jupyter.status} {jupyter.ename or ''}, "
            f"pi-repl {mcp.status} {mcp.ename or ''}"
        )
    if jupyter.number != mcp.number:
        problems.append(f"cell number: Jupyter In[{jupyter.number}], pi-repl cell {mcp.number}")
    if jupyter.images != mcp.images:
        problems.append(f"images: Jupyter {jupyter.images}, pi-repl {mcp.images}")
    expected = normalise(jupyter.text, paths)
    actual = normalise(mcp.text, paths)
    for page in jupyter.pager:
        page = normalise(page, paths).strip("\n")
        if page in actual:
            actual = actual.replace(page, "", 1)
        else:
            first = page.splitlines()[0] if page else ""
            problems.append(f"pager output missing (Jupyter's pager shows {first!r} …)")
    if jupyter.pager:  # where the pager text stood, at most a line break is left
        actual = re.sub(r"\n{2,}", "\n", actual)
        expected = re.sub(r"\n{2,}", "\n", expected)
    expected, actual = _or_no_output(expected), _or_no_output(actual)
    if jupyter.input_refused and mcp.input_refused:  # INPUT_REFUSED
        expected = _before_refusal(expected)
        actual = _before_refusal(actual)
    if mcp.truncated:  # OUTPUT_CAP
        expected, actual = _common_head(expected, actual)
    if expected != actual:
        problems.append("text differs:\n" + first_diff(expected, actual))
    if not problems:
        return []
    return [f"{where} ({first_line!r}):\n  " + "\n  ".join(problems)]


def _or_no_output(text: str) -> str:
    """An empty cell reads `(no output)`, however it is empty (a lone space, a removed page)."""
    text = text.strip("\n")
    return text if text.strip() else "(no output)"


def _before_refusal(text: str) -> str:
    """The text up to the first traceback that ends in a refused input; the debugger's
    listing of the refusing `raw_input` frame (printed by %debug and %pdb) is left out too."""
    text = re.sub(
        r"(?m)^> .*\(\d+\)raw_input\(\)\n(?:(?:-*>)?\s+\d+\b.*(?:\n|$))*",
        "<debugger stopped in the refused input()>\n",
        text,
    )
    lines = text.splitlines()
    for at, line in enumerate(lines):
        if re.match(r"-{20,}|Traceback \(most recent call last\)", line):
            rest = "\n".join(lines[at:])
            if "StdinNotImplementedError" in rest:
                return "\n".join(lines[:at]) + "\n<refused input() and its traceback>"
    return text


def _common_head(expected: str, actual: str) -> tuple[str, str]:
    marker = re.search(
        r" … \[line truncated: \d+ more characters\]|\n?\[pi-repl: [^\]\n]*(?:omitted|cut at)",
        actual,
    )
    if not marker:
        return expected, actual
    head = actual[: marker.start()]
    return expected[: len(head)] + "<cut>", head + "<cut>"


def first_diff(expected: str, actual: str, context: int = 3, limit: int = 30) -> str:
    diff = list(
        difflib.unified_diff(
            expected.splitlines(),
            actual.splitlines(),
            "Jupyter (nbclient)",
            "pi-repl mcp",
            n=context,
            lineterm="",
        )
    )
    if len(diff) > limit:
        diff = diff[:limit] + [f"… ({len(diff) - limit} more diff lines)"]
    return "\n".join("    " + line for line in diff)


# ---------------------------------------------------------------------------------------------
# The test.
# ---------------------------------------------------------------------------------------------


def pi_repl_binary() -> Path:
    binary = Path(os.environ.get("PI_REPL_BIN") or REPO / "target" / "debug" / "pi-repl")
    assert binary.is_file(), f"{binary} is missing: run `cargo build` (or set PI_REPL_BIN)"
    return binary


@pytest.fixture
def shared_environment(tmp_path, monkeypatch):
    """The environment both runs share; see the module doc."""
    ipython = tmp_path / "ipython"
    startup = ipython / "profile_default" / "startup"
    startup.mkdir(parents=True)
    (startup / "00-corpus-seed.py").write_text(SEED_STARTUP)
    monkeypatch.setenv("IPYTHONDIR", str(ipython))
    monkeypatch.setenv("MPLBACKEND", INLINE_BACKEND)
    monkeypatch.setenv("PYTHONHASHSEED", "0")
    monkeypatch.setenv("MPLCONFIGDIR", str(tmp_path / "matplotlib"))
    return tmp_path


NOTEBOOKS = sorted(CORPUS.glob("*.ipynb"))


def test_the_corpus_is_there():
    assert len(NOTEBOOKS) >= 4, NOTEBOOKS


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_cells_read_as_in_jupyter(path, shared_environment):
    """Each code cell of the notebook: same status, error, cell number, images and text."""
    binary = pi_repl_binary()
    jupyter_cwd = shared_environment / "jupyter-cwd"
    mcp_cwd = shared_environment / "pi-repl-cwd"
    home = shared_environment / "pi-repl-home"
    for directory in (jupyter_cwd, mcp_cwd, home):
        directory.mkdir()
    paths = {
        str(jupyter_cwd.resolve()): "<cwd>",
        str(mcp_cwd.resolve()): "<cwd>",
        str(jupyter_cwd): "<cwd>",
        str(mcp_cwd): "<cwd>",
        str(home): "<home>",
    }

    jupyter = run_in_jupyter(path, jupyter_cwd)
    mcp, log = run_in_pi_repl(path, binary, home, mcp_cwd)

    notebook = nbformat.read(path, as_version=4)
    assert sorted(jupyter) == sorted(mcp), "both runs ran the same cells"
    assert jupyter, f"{path.name} has no code cells"
    problems = []
    for index, source in code_cells(notebook):
        problems += compare(path.name, index, source, jupyter[index], mcp[index], paths)
    if problems:
        pytest.fail(
            f"{len(problems)} of {len(jupyter)} cells differ from Jupyter "
            f"(accepted differences: {', '.join(e.name for e in EXPECTED_DIFFERENCES)}; "
            f"server log: {log}):\n\n" + "\n\n".join(problems),
            pytrace=False,
        )


# ---------------------------------------------------------------------------------------------
# The comparison itself, on hand-made cells (no kernel): it reports what it must.
# ---------------------------------------------------------------------------------------------


def cell(text, status="ok", ename=None, number=1, images=0, **extra) -> Cell:
    return Cell(status=status, ename=ename, number=number, images=images, text=text, **extra)


def test_a_shown_result_that_jupyter_hides_is_reported_with_its_lines():
    problems = compare(
        "plots.ipynb",
        4,
        "plt.plot(x, y);",
        cell("[image]", images=1),
        mcp_cell(
            {
                "content": [
                    {"type": "text", "text": "[image 1: 640×480 PNG; original: /o/1.png]\n"
                     "[<matplotlib.lines.Line2D at 0x7f3a2c>]"},
                    {"type": "image", "data": "", "mimeType": "image/png"},
                ],
                "structuredContent": {"status": "ok", "cell": 1, "error": None},
            }
        ),
        {},
    )
    assert len(problems) == 1, problems
    assert problems[0].startswith("plots.ipynb, cell 4 ('plt.plot(x, y);')"), problems
    assert "+[<matplotlib.lines.Line2D at 0x…>]" in problems[0], problems


def test_status_cell_number_and_images_are_compared():
    problems = compare(
        "n.ipynb", 1, "f()", cell("x", number=7, images=1),
        cell("x", status="error", ename="KeyError", number=1), {},
    )
    assert "status: Jupyter ok , pi-repl error KeyError" in problems[0], problems
    assert "cell number: Jupyter In[7], pi-repl cell 1" in problems[0], problems
    assert "images: Jupyter 1, pi-repl 0" in problems[0], problems


def test_pager_text_may_stand_anywhere_but_must_be_there():
    page = "Signature: len(obj, /)\nDocstring: Return the number of items in a container."
    jupyter = cell("(no output)", pager=[page])
    assert compare("n.ipynb", 1, "len?", jupyter, cell(page + "\n"), {}) == []
    missing = compare("n.ipynb", 1, "len?", jupyter, cell("(no output)"), {})
    assert "pager output missing" in missing[0], missing


def test_a_refused_input_compares_what_came_before_it():
    jupyter = cell(
        "asked\n" + "-" * 75 + "\nStdinNotImplementedError  Traceback\nraw_input was called",
        status="error", ename="StdinNotImplementedError", input_refused=True,
    )
    same_before = cell(
        "asked\n" + "-" * 75 + "\nStdinNotImplementedError  Traceback\ninput() is not available",
        status="error", ename="StdinNotImplementedError", input_refused=True,
    )
    assert compare("n.ipynb", 1, "input()", jupyter, same_before, {}) == []
    other_before = cell(same_before.text.replace("asked", "other"), status="error",
                        ename="StdinNotImplementedError", input_refused=True)
    assert compare("n.ipynb", 1, "input()", jupyter, other_before, {}), "stdout is compared"


def test_normalising_hides_addresses_timings_cell_files_and_paths():
    raw = (
        "\x1b[31m<Foo at 0x7f00aa>\x1b[0m Wall time: 12.4 μs\n"
        "/tmp/ipykernel_123/4021589855.py:2: UserWarning  \n/work/x/cwd/data.npz"
    )
    assert normalise(raw, {"/work/x/cwd": "<cwd>"}) == (
        "<Foo at 0x…> Wall time: <time>\n<cell file>:2: UserWarning\n<cwd>/data.npz"
    )
