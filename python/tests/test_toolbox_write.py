"""The default ``write`` helper, loaded the way a kernel loads it."""

import os
import stat
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pi_repl_kernel import helpers  # noqa: E402

TOOLBOX = Path(helpers.__file__).parent / "toolbox"


@pytest.fixture(scope="module")
def write():
    namespace = {}
    record = helpers.load(str(TOOLBOX / "write.py"), namespace)
    assert record["error"] is None, record["error"]
    return namespace["write"]


def leftovers(directory):
    return [name for name in os.listdir(directory) if name.endswith(".tmp")]


def test_creates_parent_directories_and_says_what_it_wrote(tmp_path, write):
    target = tmp_path / "a" / "b" / "notes.txt"
    message = write(str(target), "one\ntwo\n")
    assert target.read_text() == "one\ntwo\n"
    assert message == f"Created {target} (2 lines, 8 bytes; made directory {tmp_path / 'a'})."


def test_overwriting_replaces_the_file_atomically_and_keeps_its_mode(tmp_path, write):
    target = tmp_path / "script.sh"
    target.write_text("old content\n")
    target.chmod(0o751)
    inode_before = target.stat().st_ino
    message = write(str(target), "echo new")
    assert target.read_text() == "echo new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o751
    assert target.stat().st_ino != inode_before, "replaced by a rename, not rewritten in place"
    assert message == f"Overwrote {target} (1 line, 8 bytes; was 12 bytes)."
    assert leftovers(tmp_path) == []


def test_a_new_file_gets_the_default_mode_under_the_umask(tmp_path, write):
    previous = os.umask(0o027)
    try:
        write(str(tmp_path / "fresh.txt"), "x")
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "fresh.txt").stat().st_mode) == 0o640


def test_a_failed_write_leaves_the_old_file_whole_and_no_temp_file(tmp_path, write, monkeypatch):
    target = tmp_path / "precious.txt"
    target.write_text("keep me\n")

    def failing_fsync(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(OSError, match="No space left"):
        write(str(target), "half written")
    monkeypatch.undo()
    assert target.read_text() == "keep me\n"
    assert leftovers(tmp_path) == []


def test_a_relative_path_and_a_symlink_and_bytes(tmp_path, write, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write("relative.txt", "here")
    assert (tmp_path / "relative.txt").read_text() == "here"
    (tmp_path / "link.txt").symlink_to(tmp_path / "relative.txt")
    write("link.txt", b"through the link\x00")
    assert (tmp_path / "link.txt").is_symlink(), "the link stays a link"
    assert (tmp_path / "relative.txt").read_bytes() == b"through the link\x00"


def test_bad_content_and_a_directory_are_refused(tmp_path, write):
    with pytest.raises(TypeError, match=r"str or bytes, got dict.*json.dumps"):
        write(str(tmp_path / "x.json"), {"a": 1})
    with pytest.raises(IsADirectoryError):
        write(str(tmp_path), "text")
    assert not (tmp_path / "x.json").exists()
