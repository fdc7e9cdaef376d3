"""The default ``read`` helper, loaded the way a kernel loads it."""

import os
import pickle
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pi_repl_kernel import helpers, toolbox_support  # noqa: E402

TOOLBOX = Path(helpers.__file__).parent / "toolbox"


@pytest.fixture(scope="module")
def toolbox():
    namespace = {}
    record = helpers.load(str(TOOLBOX / "read.py"), namespace)
    assert record["error"] is None, record["error"]
    return namespace, sys.modules["pi_repl_helpers.read"]


@pytest.fixture
def read(toolbox):
    return toolbox[0]["read"]


def test_one_numbered_shape_for_the_whole_file_and_for_a_range(tmp_path, read):
    path = tmp_path / "five.txt"
    path.write_text("a\nb\nc\nd\ne")
    assert read(str(path)) == "     1\ta\n     2\tb\n     3\tc\n     4\td\n     5\te"
    assert read(str(path), offset=2, limit=2) == (
        f"     2\tb\n     3\tc\n\n[Lines 2-3 of 5 shown. Continue: read({str(path)!r}, offset=4)]"
    )
    assert read(str(path), offset=4) == "     4\td\n     5\te"
    assert read(str(path), offset=-2) == "     4\td\n     5\te"  # negative: from the end
    assert read(str(path), offset=-99) == read(str(path))
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    assert read(str(empty)) == f"[{empty} is empty]"


def test_crlf_line_ends_are_removed_from_the_lines_and_named(tmp_path, read):
    path = tmp_path / "crlf.txt"
    path.write_bytes(b"one\r\ntwo\r\nno newline at the end")
    assert read(str(path)) == (
        "     1\tone\n     2\ttwo\n     3\tno newline at the end\n\n"
        "[CRLF line endings; edit() matches and keeps them]"
    )


def test_an_offset_past_the_end_says_how_long_the_file_is(tmp_path, read):
    path = tmp_path / "three.txt"
    path.write_text("a\nb\nc\n")
    with pytest.raises(ValueError, match=r"three.txt: offset 9 is past the end: the file has 3 "):
        read(str(path), offset=9)
    for bad in (0, "2", 1.5, True):
        with pytest.raises(ValueError, match="non-zero integer"):
            read(str(path), offset=bad)
    with pytest.raises(ValueError, match="limit must be a positive integer"):
        read(str(path), offset=1, limit=-1)


def test_the_line_cap_stops_a_long_file_with_the_call_that_continues(tmp_path, read, toolbox):
    module = toolbox[1]
    path = tmp_path / "long.txt"
    path.write_text("".join(f"{n}\n" for n in range(1, module.MAX_LINES + 101)))
    text = read(str(path))
    body, note = text.split("\n\n")
    assert len(body.splitlines()) == module.MAX_LINES
    assert note == (
        f"[Lines 1-{module.MAX_LINES:,} of {module.MAX_LINES + 100:,} shown "
        f"({module.MAX_LINES:,} line limit). Continue: read({str(path)!r}, "
        f"offset={module.MAX_LINES + 1})]"
    )
    assert read(str(path), limit=10**6).split("\n\n")[0] == body  # a bigger limit is capped
    rest = read(str(path), offset=module.MAX_LINES + 1)
    assert rest.splitlines()[0] == f"{module.MAX_LINES + 1:6}\t{module.MAX_LINES + 1}"
    assert len(rest.splitlines()) == 100 and "Continue" not in rest


def test_the_byte_cap_stops_at_a_whole_line_and_says_so(tmp_path, read, toolbox):
    module = toolbox[1]
    path = tmp_path / "wide.txt"
    line = "x" * 999 + "\n"
    count = module.MAX_BYTES // len(line) + 20
    path.write_text(line * count)
    text = read(str(path))
    body, note = text.split("\n\n")
    shown = module.MAX_BYTES // len(line)
    assert len(body.splitlines()) == shown
    assert note == (
        f"[Lines 1-{shown} of {count} shown ({module.MAX_BYTES // 1024} KiB limit). "
        f"Continue: read({str(path)!r}, offset={shown + 1})]"
    )


def test_a_5_mb_one_line_file_with_limit_1_returns_its_head_not_5_mb(tmp_path, read, toolbox):
    module = toolbox[1]
    path = tmp_path / "min.js"
    path.write_text("y" * 5_000_007)
    text = read(str(path), limit=1)
    assert len(text) < module.MAX_BYTES + 500
    assert text.startswith("     1\t" + "y" * 1000)
    assert "[Line 1 is 4.8 MiB, over the 50 KiB read() returns: only its start is shown." in text


def test_a_relative_path_resolves_against_the_current_directory(tmp_path, monkeypatch, read):
    (tmp_path / "here.txt").write_text("found")
    monkeypatch.chdir(tmp_path)
    assert read("here.txt") == "     1\tfound"


def test_a_missing_file_is_named_with_similar_names(tmp_path, read):
    (tmp_path / "config.yaml").write_text("x")
    (tmp_path / "config.json").write_text("x")
    (tmp_path / "unrelated.bin").write_text("x")
    with pytest.raises(FileNotFoundError) as caught:
        read(str(tmp_path / "config.yml"))
    message = str(caught.value)
    assert f"No such file: {tmp_path / 'config.yml'}" in message
    assert "config.yaml" in message and "config.json" in message and "unrelated" not in message
    with pytest.raises(FileNotFoundError, match="does not exist either"):
        read(str(tmp_path / "nodir" / "file.txt"))


def test_a_directory_is_refused_with_its_entries(tmp_path, read):
    (tmp_path / "inner.txt").write_text("x")
    with pytest.raises(IsADirectoryError, match=r"directory \(1 entry: inner.txt\).*os.listdir"):
        read(str(tmp_path))


def test_a_fifo_and_a_device_are_refused_without_blocking(tmp_path, read):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    # No writer ever opens the FIFO: a read that opened it would block here for ever.
    with pytest.raises(ValueError, match=r"is a named pipe \(FIFO\), not a regular file"):
        read(str(fifo))
    with pytest.raises(ValueError, match=r"/dev/null is a character device"):
        read("/dev/null")


def test_a_binary_file_is_refused_naming_its_type_and_size(tmp_path, read):
    binary = tmp_path / "prog"
    binary.write_bytes(b"\x7fELF\x02\x01\x01" + b"\x00" * 2041)
    with pytest.raises(ValueError, match=r"is an ELF executable or library \(2.0 KiB\), not "
                       r"text.*open\(.*'rb'\)"):
        read(str(binary))
    latin = tmp_path / "latin.txt"
    latin.write_bytes("caf\xe9 au lait\n".encode("latin-1"))
    with pytest.raises(ValueError, match=r"not UTF-8 text \(another encoding\?\).*latin-1"):
        read(str(latin))


PNG_1X1 = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6300010000050001"
    "0d0a2db40000000049454e44ae426082"
)


def test_an_image_is_displayed_and_described(tmp_path, read, monkeypatch):
    display = pytest.importorskip("IPython.display")
    shown = []
    monkeypatch.setattr(display, "display", lambda obj: shown.append(obj))
    path = tmp_path / "dot.png"
    path.write_bytes(PNG_1X1)
    text = read(str(path))
    size = len(PNG_1X1)
    assert text == f"Read image file {path} [image/png, {size} bytes, 1x1]: shown as an image."
    assert len(shown) == 1 and shown[0].data == PNG_1X1
    base64 = __import__("base64")
    # What the kernel sends as image/png display data, which the MCP layer shows the model.
    assert base64.b64decode(shown[0]._repr_png_()) == PNG_1X1


def test_the_text_displays_as_itself_and_pickles_as_a_plain_str(tmp_path, read):
    pretty = pytest.importorskip("IPython.lib.pretty")
    path = tmp_path / "two.txt"
    path.write_text("first\nsecond\n")
    text = read(str(path))
    assert isinstance(text, str)
    assert pretty.pretty(text) == "     1\tfirst\n     2\tsecond"
    revived = pickle.loads(pickle.dumps(text))
    assert type(revived) is str and revived == text


def test_reads_are_allowed_outside_the_writable_roots(tmp_path, read, monkeypatch):
    (tmp_path / "project").mkdir()
    monkeypatch.setattr(toolbox_support, "SESSION_ROOT", str(tmp_path / "project"))
    monkeypatch.delenv(toolbox_support.ALLOW_WRITE_ENV, raising=False)
    outside = tmp_path / "library.py"
    outside.write_text("def f(): pass\n")
    assert read(str(outside)) == "     1\tdef f(): pass"
