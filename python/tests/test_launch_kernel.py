"""What ``launch`` changes in ipykernel, checked in a real kernel started as the host starts it."""

from test_toolbox_kernel import run, start_kernel

import pytest


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    with start_kernel(tmp_path_factory) as running:
        yield running[:3]


def test_printing_a_lone_surrogate_is_the_cells_unicode_encode_error(kernel):
    """Issue 22: ipykernel accepted the text, failed to send it, and printed its own traceback
    (session.py, iostream.py) into the cell's stderr; the cell itself ended ok."""
    _, client, _ = kernel
    for code in ("print('a\\ud800b')", "import sys\nsys.stderr.write('x\\udcffy')"):
        stdout, _, error = run(client, code)
        assert error is not None, code
        assert error["ename"] == "UnicodeEncodeError", error
        assert "surrogates not allowed" in error["evalue"]
        traceback = "\n".join(error["traceback"])
        assert "Cell In[" in traceback, traceback
        for internal in ("iostream", "session.py", "launch.py", "zmqstream"):
            assert internal not in traceback, traceback
        assert stdout == ""
    # The kernel goes on; text UTF-8 can encode prints as before.
    stdout, _, error = run(client, "print('a\\u00e9\\U0001f600b')")
    assert error is None and stdout == "a\u00e9\U0001f600b\n"


def test_cells_named_by_a_fast_hash_still_read_as_cells(kernel):
    """Issue 22: cells are named by blake2b instead of a pure-Python murmur2 (half a second per
    MiB of code); tracebacks still say ``Cell In[N]`` and a cell's functions keep their source."""
    _, client, _ = kernel
    _, _, error = run(client, "def f():\n    return 1 / 0\n")
    assert error is None
    stdout, _, error = run(client, "import inspect\nprint(inspect.getsource(f))")
    assert error is None and stdout == "def f():\n    return 1 / 0\n\n"
    _, _, error = run(client, "f()")
    assert error["ename"] == "ZeroDivisionError"
    assert "Cell In[" in "\n".join(error["traceback"])
    _, result, error = run(client, "s = '" + "x" * (4 << 20) + "'\nlen(s)")
    assert error is None and result == str(4 << 20)
