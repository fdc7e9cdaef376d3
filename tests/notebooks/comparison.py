"""How a cell's two records are compared: normalisation, the documented differences, the diff.

The differences that are design decisions are listed once, in ``EXPECTED_DIFFERENCES`` (and in
README.md); any other difference is reported with the notebook, the cell and the first
differing lines.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

from cell_record import MAX_IMAGES_SHOWN, Cell, strip_ansi

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

USAGE_ERROR_IS_THE_ERROR = Expected(
    "a UsageError is the cell's error",
    "IPython prints a UsageError (a mistyped magic) to stderr and the cell ends in an error with "
    "an empty traceback; pi-repl makes that line the error itself, so it is said once and not "
    "under a [stderr] label. Status, error name and the message are compared.",
)

EXPECTED_DIFFERENCES = [
    INPUT_REFUSED,
    OUTPUT_CAP,
    IMAGE_CAP,
    USAGE_ERROR_IS_THE_ERROR,
]


TIME_UNIT = r"(?:ns|µs|μs|us|ms|s|sec|seconds|min)"
PROFILE_HEADER = re.compile(r"function calls (?:\(\d+ primitive calls\) )?in ")


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
    if PROFILE_HEADER.search(text):  # only there: a DataFrame's rows look the same
        text = re.sub(r"(?m)^(\s*\d+(?:/\d+)?)((?:\s+\d+\.\d+){4})", _prun_row, text)
        text = re.sub(r"in \d+\.\d+ seconds", "in <time> seconds", text)
        text = _ties_in_order(text)
    text = re.sub(r"(?m)[ \t]+$", "", text)
    return text


PROFILE_ROW = re.compile(r"^\s*(\d+(?:/\d+)?)  <times> ")


def _ties_in_order(text: str) -> str:
    """Profiler rows with the same count, sorted: pstats orders ties by the profiled objects'
    memory addresses, which any change to what the process imported or allocated before
    shuffles (a kernel started in its own PID namespace, for one). Rows with different counts
    keep their order."""
    lines = text.split("\n")
    start = 0
    while start < len(lines):
        match = PROFILE_ROW.match(lines[start])
        if not match:
            start += 1
            continue
        end = start + 1
        while end < len(lines) and (tie := PROFILE_ROW.match(lines[end])) \
                and tie.group(1) == match.group(1):
            end += 1
        lines[start:end] = sorted(lines[start:end])
        start = end
    return "\n".join(lines)


def _prun_row(match: re.Match) -> str:
    """A profiler row `ncalls tottime percall cumtime percall`: the counts stay, times go."""
    return match.group(1) + "  <times>"


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
    if jupyter.ename == mcp.ename == "UsageError":  # USAGE_ERROR_IS_THE_ERROR
        expected = expected.replace("[stderr]\nUsageError:", "UsageError:", 1)
    if mcp.truncated:  # OUTPUT_CAP
        expected, actual = _common_head(expected, actual)
    if expected != actual:
        problems.append("text differs:\n" + first_diff(expected, actual))
    if not problems:
        return []
    return [f"{where} ({first_line!r}):\n  " + "\n  ".join(problems)]


def _or_no_output(text: str) -> str:
    """An empty cell compares as `(no output)`, however it is empty (pi-repl's result has no
    text at all, Jupyter's cell no output, a lone space, a removed page)."""
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
        if line.startswith("StdinNotImplementedError: "):  # pi-repl's one-line debugger refusal
            return "\n".join(lines[:at]) + "\n<refused input() and its traceback>"
        if re.match(r"-{20,}|Traceback \(most recent call last\)", line):
            rest = "\n".join(lines[at:])
            if "StdinNotImplementedError" in rest:
                return "\n".join(lines[:at]) + "\n<refused input() and its traceback>"
    return text


# The line a cut channel's text starts with (docs/mcp.md: the pointer to the whole output comes
# first, where every client keeps it).
_CUT_POINTER = re.compile(r"(?m)^\[pi-repl: \w+ cut: [^\]\n]*\]\n?")


def _common_head(expected: str, actual: str) -> tuple[str, str]:
    actual = _CUT_POINTER.sub("", actual)
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
