"""The live notebook of a real session (issue 26), read by the Jupyter tools people use.

A notebook of the corpus (``psdh-04.01-simple-line-plots``: text, values and plots) is run
through the real binary, ``pi-repl exec --notebook FILE`` with every code cell as one cell of a
session. The file it writes is then:

- **validated** by ``nbformat`` (the 4.5 schema: cell ids required);
- **re-executed under nbclient** in a real ipykernel, and each cell's outputs compared with
  the session's: the same output types in the same order, the same text of streams, values and
  errors (memory addresses normalised), the same MIME types of each display, and images of the
  same pixel size (the bytes are not compared: a PNG may differ in its metadata);
- **rendered to HTML with nbconvert and opened in headless Chromium**: the DOM has every code
  cell and every plot as a loaded image, and the screenshot shows the plots' lines (pixels of
  matplotlib's default blue) beside the cells' code areas. Without a Chromium this part skips
  with the reason (pytest -rs shows it); it never passes without one.
"""

from __future__ import annotations

import base64
import html as html_module
import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from runs import KERNEL_NAME, code_cells, write_kernelspec
from test_corpus import CORPUS, INLINE_BACKEND, pi_repl_binary

NOTEBOOK = CORPUS / "psdh-04.01-simple-line-plots.ipynb"

BROWSERS = ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome")

# matplotlib's first colour (C0, #1f77b4): the lines of the plots in the screenshot.
PLOT_BLUE = (0x1F, 0x77, 0xB4)


@pytest.fixture(scope="module")
def session_notebook(tmp_path_factory) -> Path:
    """The notebook `pi-repl exec --notebook` wrote for the corpus notebook's code cells."""
    tmp = tmp_path_factory.mktemp("live-notebook")
    for name in ("home", "cwd"):
        (tmp / name).mkdir()
    source = nbformat.read(NOTEBOOK, as_version=4)
    cells = [code for _, code in code_cells(source)]
    out = tmp / "session.ipynb"
    env = {
        **os.environ,
        "PI_REPL_HOME": str(tmp / "home"),
        "MPLBACKEND": INLINE_BACKEND,
        "MPLCONFIGDIR": str(tmp / "matplotlib"),
    }
    run = subprocess.run(
        [str(pi_repl_binary()), "exec", "--python", sys.executable, "--notebook", str(out), *cells],
        cwd=tmp / "cwd",
        env=env,
        capture_output=True,
        text=True,
    )
    assert out.is_file(), f"no notebook written: {run.stderr}"
    return out


def test_the_session_notebook_validates_and_holds_every_cell(session_notebook):
    notebook = nbformat.read(session_notebook, as_version=nbformat.NO_CONVERT)
    nbformat.validate(notebook)
    assert (notebook.nbformat, notebook.nbformat_minor) == (4, 5)
    source = nbformat.read(NOTEBOOK, as_version=4)
    expected = [code for _, code in code_cells(source)]
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert [cell.source for cell in code] == expected
    assert [cell.execution_count for cell in code] == list(range(1, len(expected) + 1))
    images = [o for cell in code for o in cell.outputs if "image/png" in o.get("data", {})]
    assert len(images) >= 10, "the corpus notebook's plots are in the notebook"


def output_summary(output) -> tuple:
    kind = output["output_type"]
    if kind == "stream":
        return (kind, output["name"], normalise(output["text"]))
    if kind == "error":
        return (kind, output["ename"], normalise(output["evalue"]))
    data = output.get("data", {})
    plain = normalise(data.get("text/plain", ""))
    size = png_size(data["image/png"]) if "image/png" in data else None
    return (kind, tuple(sorted(data)), plain, size)


def normalise(text) -> str:
    text = "".join(text) if isinstance(text, list) else text
    return re.sub(r"0x[0-9a-f]+", "0x…", text)


def png_size(data) -> tuple[int, int]:
    png = base64.b64decode("".join(data) if isinstance(data, list) else data)
    assert png[1:4] == b"PNG"
    return int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")


def test_the_session_notebook_re_executes_under_nbclient_to_the_same_outputs(
    session_notebook, tmp_path, monkeypatch
):
    write_kernelspec(tmp_path / "jupyter")
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    monkeypatch.setenv("MPLBACKEND", INLINE_BACKEND)
    monkeypatch.setenv("MPLCONFIGDIR", str(tmp_path / "matplotlib"))
    session = nbformat.read(session_notebook, as_version=4)
    again = nbformat.read(session_notebook, as_version=4)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    NotebookClient(
        again,
        allow_errors=True,
        timeout=600,
        startup_timeout=600,
        kernel_name=KERNEL_NAME,
        resources={"metadata": {"path": str(cwd)}},
    ).execute()
    compared = 0
    for ours, theirs in zip(session.cells, again.cells, strict=True):
        if ours.cell_type != "code":
            continue
        assert [output_summary(o) for o in ours.outputs] == [
            output_summary(o) for o in theirs.outputs
        ], f"cell {ours.execution_count}: {ours.source[:60]!r}"
        compared += 1
    assert compared == len([c for c in session.cells if c.cell_type == "code"]) >= 10


def find_browser() -> str | None:
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    return None


def test_the_session_notebook_shows_its_cells_and_plots_in_a_browser(session_notebook, tmp_path):
    browser = find_browser()
    if browser is None:
        pytest.skip(
            "NOT TESTED: no Chromium on this machine (looked for "
            + ", ".join(BROWSERS)
            + "); install one, e.g. `apt-get install chromium-headless-shell`"
        )
    from nbconvert import HTMLExporter
    from PIL import Image

    notebook = nbformat.read(session_notebook, as_version=4)
    exporter = HTMLExporter(template_name="lab")
    # Nothing from the network: MathJax and require.js are not needed to show cells and plots.
    exporter.mathjax_url = ""
    exporter.require_js_url = ""
    html, _ = exporter.from_notebook_node(notebook)
    page = tmp_path / "session.html"
    page.write_text(html)

    common = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]
    dom = subprocess.run(
        [*common, "--dump-dom", page.as_uri()], capture_output=True, text=True, check=True
    ).stdout
    code_cells_shown = len(re.findall(r'class="[^"]*jp-CodeCell', dom))
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert code_cells_shown == len(code), "every code cell is in the page"
    plots = [o for cell in code for o in cell.outputs if "image/png" in o.get("data", {})]
    assert dom.count('src="data:image/png;base64,') == len(plots)
    # The code reads as written once the highlighting's tags are gone.
    text = html_module.unescape(re.sub(r"<[^>]+>", "", dom))
    assert "plt.plot(x, np.sin(x))" in text

    shot = tmp_path / "shot.png"
    subprocess.run(
        [*common, "--window-size=1200,2400", f"--screenshot={shot}", page.as_uri()],
        capture_output=True,
        check=True,
        cwd=tmp_path,
    )
    image = Image.open(io.BytesIO(shot.read_bytes())).convert("RGB")
    near_blue = sum(
        1
        for pixel in image.get_flattened_data()
        if all(abs(channel - want) <= 40 for channel, want in zip(pixel, PLOT_BLUE))
    )
    # The first plots fall in the window: their lines are hundreds of blue pixels.
    assert near_blue > 500, f"the screenshot shows no plot line ({near_blue} blue pixels)"
    (tmp_path / "shot-summary.json").write_text(json.dumps({"blue_pixels": near_blue}))
