"""The default ``edit`` helper, loaded the way a kernel loads it."""

import os
import stat
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pi_repl_kernel import helpers, toolbox_support  # noqa: E402

TOOLBOX = Path(helpers.__file__).parent / "toolbox"

SOURCE = """\
import os


class Counter:
    def __init__(self, start=0):
        self.value = start

    def bump(self, step=1):
        self.value += step
        return self.value

    def reset(self):
        self.value = 0
        return self.value
"""


@pytest.fixture(autouse=True)
def writable(tmp_path, monkeypatch):
    """Each test's directory is the session's project (writes are allowed only there)."""
    monkeypatch.setattr(toolbox_support, "SESSION_ROOT", str(tmp_path))
    monkeypatch.delenv(toolbox_support.ALLOW_WRITE_ENV, raising=False)


@pytest.fixture(scope="module")
def toolbox():
    namespace = {}
    record = helpers.load(str(TOOLBOX / "edit.py"), namespace)
    assert record["error"] is None, record["error"]
    return namespace, sys.modules["pi_repl_helpers.edit"]


@pytest.fixture
def edit(toolbox):
    return toolbox[0]["edit"]


@pytest.fixture
def source(tmp_path):
    path = tmp_path / "counter.py"
    path.write_text(SOURCE)
    return path


def test_a_single_replacement_returns_a_unified_diff(source, edit):
    diff = edit(str(source), "self.value += step", "self.value += 2 * step")
    assert source.read_text() == SOURCE.replace("self.value += step", "self.value += 2 * step")
    assert diff.startswith(f"--- a{source}\n+++ b{source}\n@@ ")
    assert "\n-        self.value += step\n+        self.value += 2 * step\n" in diff


def test_count_n_needs_exactly_n_and_none_replaces_every_one(source, edit):
    with pytest.raises(ValueError, match=r"occurs 2 times .* count=3 needs exactly 3"):
        edit(str(source), "return self.value", "return self", count=3)
    edit(str(source), "return self.value", "return self", count=2)
    assert source.read_text().count("return self\n") == 2
    edit(str(source), "self.", "this.", count=None)
    assert "self." not in source.read_text()
    edit(str(source), "this.", "self.", count=-1)  # -1 is accepted as "every occurrence" too
    assert source.read_text().count("self.") == 3


def test_an_ambiguous_match_lists_the_line_of_each_occurrence_and_changes_nothing(source, edit):
    with pytest.raises(ValueError) as caught:
        edit(str(source), "return self.value", "return None")
    message = str(caught.value)
    assert "occurs 2 times" in message and "at lines 10, 14" in message
    assert "line 10: return self.value" in message and "line 14: return self.value" in message
    assert "count=2" in message and "count=None" in message
    assert source.read_text() == SOURCE


def test_a_missing_match_shows_the_nearest_lines_and_what_differs(source, edit):
    with pytest.raises(ValueError) as caught:
        edit(str(source), "    def bump(self, stp=1):\n        self.value += step\n", "x")
    message = str(caught.value)
    assert "not found" in message
    assert "nearest text is lines 8-9" in message
    assert "     8\t    def bump(self, step=1):" in message
    assert "-    def bump(self, stp=1):\n+    def bump(self, step=1):" in message
    assert source.read_text() == SOURCE


def test_a_match_that_differs_only_in_whitespace_says_so(source, edit):
    with pytest.raises(ValueError) as caught:
        edit(str(source), "def reset(self):\n    self.value = 0", "x")  # indentation lost
    message = str(caught.value)
    assert "matches lines 12-13 if whitespace is ignored" in message
    assert "'    def reset(self):'" in message  # repr makes the real indentation visible


def test_nothing_similar_is_said_plainly(source, edit):
    with pytest.raises(ValueError, match="Nothing similar"):
        edit(str(source), "completely unrelated sentence about llamas", "x")


def test_the_file_keeps_its_mode_and_is_replaced_atomically(source, edit):
    source.chmod(0o700)
    inode = source.stat().st_ino
    edit(str(source), "start=0", "start=1")
    assert stat.S_IMODE(source.stat().st_mode) == 0o700
    assert source.stat().st_ino != inode
    assert [name for name in os.listdir(source.parent) if ".tmp" in name] == []


def test_crlf_files_match_plain_newlines_and_stay_crlf(tmp_path, edit):
    path = tmp_path / "windows.txt"
    path.write_bytes(b"alpha\r\nbeta\r\ngamma\r\n")
    edit(str(path), "alpha\nbeta\n", "one\ntwo\n")
    assert path.read_bytes() == b"one\r\ntwo\r\ngamma\r\n"


def test_bad_arguments_and_missing_files_are_clear(tmp_path, source, edit):
    with pytest.raises(ValueError, match="old is empty"):
        edit(str(source), "", "x")
    with pytest.raises(ValueError, match="the same"):
        edit(str(source), "bump", "bump")
    with pytest.raises(ValueError, match="count must be"):
        edit(str(source), "bump", "push", count=0)
    with pytest.raises(FileNotFoundError, match=r"counter.py.*write\(path, content\)"):
        edit(str(tmp_path / "countr.py"), "a", "b")
    binary = tmp_path / "blob.bin"
    binary.write_bytes(b"a\x00b")
    with pytest.raises(ValueError, match="binary"):
        edit(str(binary), "a", "b")


def test_a_long_diff_is_cut_and_says_so(tmp_path, edit, toolbox):
    module = toolbox[1]
    path = tmp_path / "many.txt"
    path.write_text("item\n" * 300)
    diff = edit(str(path), "item", "thing", count=None)
    lines = diff.splitlines()
    assert len(lines) == module.MAX_DIFF_LINES + 1
    assert lines[-1].startswith("... (") and "more diff lines" in lines[-1]
    assert path.read_text() == "thing\n" * 300


def test_several_edits_apply_together_with_a_diff_of_just_their_hunks(tmp_path, edit):
    path = tmp_path / "long.txt"
    path.write_text("".join(f"line {n}\n" for n in range(1, 101)))
    diff = edit(str(path), edits=[("line 10\n", "ten\n"), ("line 90\n", "ninety\n")])
    assert path.read_text().count("line ") == 98 and "ten\n" in path.read_text()
    hunks = [line for line in diff.splitlines() if line.startswith("@@")]
    assert hunks == ["@@ -7,7 +7,7 @@", "@@ -87,7 +87,7 @@"]
    assert " line 50" not in diff  # only the changed regions, with 3 lines of context


def test_a_multi_edit_failing_on_its_third_part_changes_nothing(source, edit):
    inode = source.stat().st_ino
    with pytest.raises(ValueError) as caught:
        edit(str(source), edits=[("start=0", "start=1"), ("step=1", "step=2"), ("nowhere", "x")])
    message = str(caught.value)
    assert message.startswith("edits[2]: old was not found")
    assert message.endswith("Nothing was changed: edits are applied all or none.")
    assert source.read_text() == SOURCE and source.stat().st_ino == inode


def test_overlapping_edits_are_refused(source, edit):
    with pytest.raises(ValueError, match=r"edits\[0\] and edits\[1\] overlap at line 6"):
        edit(str(source), edits=[("self.value = start", "x"), ("value = start", "y")])
    assert source.read_text() == SOURCE


def test_a_line_ending_only_edit_shows_the_line_ends_in_the_diff(tmp_path, edit):
    path = tmp_path / "mixed.txt"
    path.write_bytes(b"a\r\nb\r\nc\r\n")
    diff = edit(str(path), "b\r\n", "b\n")
    assert path.read_bytes() == b"a\r\nb\nc\r\n"
    assert "(line ends shown: \u240d\u240a = CRLF, \u240a = LF)" in diff
    assert "\n-b\u240d\u240a\n+b\u240a\n" in diff


def test_tolerances_are_used_only_without_an_exact_match_and_are_reported(tmp_path, edit):
    path = tmp_path / "t.py"
    path.write_text("x = 1   \nprint(\u201chi\u201d)\ny = 2\n")
    diff = edit(str(path), "x = 1\nprint(\"hi\")", "x = 3\nprint('hi')")
    assert diff.startswith(
        "[No exact match; matched at line 1 with typographic quotes, dashes or spaces matched "
        "as plain ones; trailing whitespace ignored.]\n"
    )
    assert path.read_text() == "x = 3\nprint('hi')\ny = 2\n"
    diff = edit(str(path), "     3\ty = 2\n", "     3\ty = 4\n")  # pasted from read()
    assert diff.startswith("[No exact match; line-number prefixes (as read() shows them) removed.]")
    assert path.read_text() == "x = 3\nprint('hi')\ny = 4\n"


def test_read_only_fifo_and_outside_paths_are_refused(tmp_path, source, edit, monkeypatch):
    source.chmod(0o444)
    with pytest.raises(PermissionError, match="read-only.*force=True"):
        edit(str(source), "start=0", "start=1")
    edit(str(source), "start=0", "start=1", force=True)
    assert "start=1" in source.read_text() and stat.S_IMODE(source.stat().st_mode) == 0o444
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="named pipe"):
        edit(str(fifo), "a", "b")
    monkeypatch.setattr(toolbox_support, "SESSION_ROOT", str(tmp_path / "sub"))
    with pytest.raises(PermissionError, match="PI_REPL_ALLOW_WRITE="):
        edit(str(source), "start=1", "start=2", force=True)


def test_an_edit_in_a_10_mb_file_diffs_only_the_changed_lines(tmp_path, edit):
    path = tmp_path / "big.txt"
    lines = [f"row {n:07d} " + "z" * 40 + "\n" for n in range(200_000)]
    path.write_text("".join(lines))
    diff = edit(str(path), "row 0150000 ", "ROW 0150000 ")
    assert len(diff.splitlines()) == 2 + 1 + 8  # headers, one hunk: 3 + 1 - 1 + 3 lines
    assert "@@ -149998,7 +149998,7 @@" in diff
    assert path.read_text().count("ROW ") == 1
