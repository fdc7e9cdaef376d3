"""The default ``read`` helper, loaded the way a kernel loads it."""

import pickle
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pi_repl_kernel import helpers  # noqa: E402

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


def test_returns_the_whole_text_exactly(tmp_path, read):
    path = tmp_path / "crlf.txt"
    path.write_bytes(b"one\r\ntwo\r\nno newline at the end")
    assert read(str(path)) == "one\r\ntwo\r\nno newline at the end"
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    assert read(str(empty)) == ""


def test_a_range_is_numbered_like_cat_n(tmp_path, read):
    path = tmp_path / "five.txt"
    path.write_text("a\nb\nc\nd\ne")
    assert read(str(path), offset=2, limit=2) == "     2\tb\n     3\tc\n"
    assert read(str(path), offset=4) == "     4\td\n     5\te"  # to the end, which has no newline
    assert read(str(path), limit=1) == "     1\ta\n"
    assert read(str(path), offset=5, limit=100) == "     5\te"


def test_an_offset_past_the_end_says_how_long_the_file_is(tmp_path, read):
    path = tmp_path / "three.txt"
    path.write_text("a\nb\nc\n")
    with pytest.raises(ValueError, match=r"offset 9 is past the end of .*three.txt, which has 3 "):
        read(str(path), offset=9)
    for bad in (0, -1, "2", 1.5, True):
        with pytest.raises(ValueError, match="positive integer"):
            read(str(path), offset=bad)
    with pytest.raises(ValueError, match="limit must be a positive integer"):
        read(str(path), offset=1, limit=0)


def test_a_relative_path_resolves_against_the_current_directory(tmp_path, monkeypatch, read):
    (tmp_path / "here.txt").write_text("found")
    monkeypatch.chdir(tmp_path)
    assert read("here.txt") == "found"


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


def test_a_binary_file_is_refused_with_how_to_read_bytes(tmp_path, read):
    binary = tmp_path / "image.png"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    with pytest.raises(ValueError, match=r"looks binary.*open\(.*'rb'\)"):
        read(str(binary))
    with pytest.raises(ValueError, match="looks binary"):
        read(str(binary), offset=1, limit=1)
    latin = tmp_path / "latin.txt"
    latin.write_bytes("caf\xe9\n".encode("latin-1"))
    with pytest.raises(ValueError, match=r"not UTF-8 text.*'rb'"):
        read(str(latin))


def test_a_huge_file_is_refused_with_its_size_and_line_count_but_a_range_works(tmp_path, toolbox):
    read, module = toolbox[0]["read"], toolbox[1]
    path = tmp_path / "big.log"
    line = "x" * 199 + "\n"
    lines = module.MAX_BYTES // len(line) + 10  # just over 256 KiB, in fewer than MAX_LINES lines
    assert lines < module.MAX_LINES
    path.write_text(line * lines)
    with pytest.raises(ValueError) as caught:
        read(str(path))
    message = str(caught.value)
    assert f"({lines:,} lines)" in message and "KiB" in message
    assert "offset=" in message and "limit=" in message
    assert read(str(path), offset=lines, limit=5) == f"{lines:6}\t{line}"


def test_too_many_lines_are_refused_without_a_range_and_without_a_limit(tmp_path, read, toolbox):
    module = toolbox[1]
    path = tmp_path / "long.txt"
    path.write_text("".join(f"{n}\n" for n in range(1, module.MAX_LINES + 2)))
    with pytest.raises(ValueError, match=f"{module.MAX_LINES + 1:,} lines"):
        read(str(path))
    with pytest.raises(ValueError, match="limit"):
        read(str(path), offset=1)  # a range to the end that is itself too long
    last = module.MAX_LINES + 1
    assert read(str(path), offset=last, limit=1) == f"{last:6}\t{last}\n"


def test_the_text_displays_as_itself_and_pickles_as_a_plain_str(tmp_path, read):
    pretty = pytest.importorskip("IPython.lib.pretty")
    path = tmp_path / "two.txt"
    path.write_text("first\nsecond\n")
    text = read(str(path))
    assert isinstance(text, str)
    assert pretty.pretty(text) == "first\nsecond\n"  # not 'first\\nsecond\\n'
    assert repr(text) == repr("first\nsecond\n")
    revived = pickle.loads(pickle.dumps(text))
    assert type(revived) is str and revived == text
