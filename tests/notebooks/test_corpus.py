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
design decisions are listed once, in ``comparison.EXPECTED_DIFFERENCES``, each with its reason
(and in README.md); any other difference fails with the notebook, the cell and the first
differing lines.

Both runs get the same interpreter (the Jupyter run through a kernelspec of its own) and the
same environment: matplotlib's inline backend (a headless Agg renderer whose
figures arrive as ``image/png`` display data, as in any notebook), one IPYTHONDIR whose startup
file seeds ``random`` and ``numpy.random`` (the corpus draws random data), and a fixed
PYTHONHASHSEED. Each run has its own empty working directory.
"""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
import pytest

from comparison import EXPECTED_DIFFERENCES, compare
from runs import code_cells, run_in_jupyter, run_in_pi_repl, write_kernelspec

CORPUS = Path(__file__).parent / "corpus"
REPO = Path(__file__).resolve().parents[2]

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
    # Jupyter's own files (the kernelspec, connection files) stay in this test's directory.
    write_kernelspec(tmp_path / "jupyter")
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "jupyter-runtime"))
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
