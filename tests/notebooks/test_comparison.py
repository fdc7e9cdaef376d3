"""The comparison of the notebook corpus, on hand-made cells (no kernel): it reports what it
must and accepts only the documented differences."""

from cell_record import Cell, mcp_cell
from comparison import compare, normalise


def cell(text, status="ok", ename=None, number=1, images=0, **extra) -> Cell:
    return Cell(status=status, ename=ename, number=number, images=images, text=text, **extra)


def test_a_shown_result_that_jupyter_hides_is_reported_with_its_lines():
    problems = compare(
        "plots.ipynb",
        4,
        "plt.plot(x, y);",
        cell("", images=1),
        mcp_cell(
            {
                "content": [
                    {"type": "text", "text": "[<matplotlib.lines.Line2D at 0x7f3a2c>]"},
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


def test_a_downscaled_images_caption_and_an_empty_result_compare_as_jupyters():
    """Issue 22: a silent cell is an empty result, and only a downscaled image has a caption."""
    silent = mcp_cell({"content": [], "_meta": {"pi-repl/outcome": {"status": "ok", "cell": 1}}})
    assert compare("n.ipynb", 1, "x = 1", cell("(no output)"), silent, {}) == []
    plotted = mcp_cell({
        "content": [
            {"type": "text", "text": "drawn\n[image 1: downscaled from 3000×1500 to 1568×784; "
             "original: /o/1.png]"},
            {"type": "image", "data": "", "mimeType": "image/png"},
        ],
        "_meta": {"pi-repl/outcome": {"status": "ok", "cell": 1}},
    })
    assert compare("n.ipynb", 1, "plot()", cell("drawn", images=1), plotted, {}) == []


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


def test_profiler_rows_lose_their_times_but_a_table_keeps_its_numbers():
    profile = (
        "         4 function calls in 0.000 seconds\n\n"
        "   ncalls  tottime  percall  cumtime  percall filename:lineno(function)\n"
        "        1    0.000    0.000    0.000    0.000 {built-in method builtins.exec}"
    )
    assert normalise(profile, {}).splitlines()[-1] == (
        "        1  <times> {built-in method builtins.exec}"
    )
    table = "0  1.764052  0.400157  0.978738  2.240893"
    assert normalise(table, {}) == table


def test_profiler_rows_with_the_same_count_compare_in_any_order():
    header = (
        "         5 function calls in 0.000 seconds\n\n"
        "   ncalls  tottime  percall  cumtime  percall filename:lineno(function)\n"
    )
    row = "        {}    0.000    0.000    0.000    0.000 {}"
    one = header + "\n".join([row.format(2, "a"), row.format(1, "<string>:1(<module>)"),
                              row.format(1, "123456.py:1(f)")])
    other = header + "\n".join([row.format(2, "a"), row.format(1, "123456.py:1(f)"),
                                row.format(1, "<string>:1(<module>)")])
    assert normalise(one, {}) == normalise(other, {})
    reordered = header + "\n".join([row.format(1, "<string>:1(<module>)"), row.format(2, "a"),
                                    row.format(1, "123456.py:1(f)")])
    assert normalise(one, {}) != normalise(reordered, {}), "different counts keep their order"
