"""The default ``write`` helper, loaded the way a kernel loads it."""

import os
import stat
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pi_repl_kernel import helpers, toolbox_support  # noqa: E402

TOOLBOX = Path(helpers.__file__).parent / "toolbox"


@pytest.fixture(scope="module")
def write():
    namespace = {}
    record = helpers.load(str(TOOLBOX / "write.py"), namespace)
    assert record["error"] is None, record["error"]
    return namespace["write"]


@pytest.fixture(autouse=True)
def writable(tmp_path, monkeypatch):
    """Each test's directory is the session's project (writes are allowed only there)."""
    monkeypatch.setattr(toolbox_support, "SESSION_ROOT", str(tmp_path))
    monkeypatch.delenv(toolbox_support.ALLOW_WRITE_ENV, raising=False)


def leftovers(directory):
    return [name for name in os.listdir(directory) if ".tmp" in name]


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


def test_a_read_only_file_is_refused_unless_forced_and_stays_read_only(tmp_path, write):
    target = tmp_path / "locked.txt"
    target.write_text("original\n")
    target.chmod(0o444)
    with pytest.raises(PermissionError, match=r"read-only \(mode -r--r--r--\).*force=True"):
        write(str(target), "changed\n")
    assert target.read_text() == "original\n"
    assert write(str(target), "changed\n", force=True).startswith(f"Overwrote {target}")
    assert target.read_text() == "changed\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o444


def test_owner_group_and_extended_attributes_are_kept(tmp_path, write):
    target = tmp_path / "owned.txt"
    target.write_text("x")
    os.setxattr(target, "user.origin", b"kept")  # the test filesystem takes user xattrs
    if os.getuid() == 0:
        os.chown(target, 4321, 4322)
    result = write(str(target), "y")
    assert "Could not keep" not in result
    assert os.getxattr(target, "user.origin") == b"kept"
    if os.getuid() == 0:
        assert (target.stat().st_uid, target.stat().st_gid) == (4321, 4322)


def test_a_fifo_target_is_refused(tmp_path, write):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match=r"named pipe \(FIFO\)"):
        write(str(fifo), "x")


def test_writes_outside_the_project_are_refused_naming_the_variable(tmp_path, write, monkeypatch):
    project = tmp_path / "project"
    outside = tmp_path / "elsewhere"
    project.mkdir()
    outside.mkdir()
    monkeypatch.setattr(toolbox_support, "SESSION_ROOT", str(project))
    with pytest.raises(PermissionError) as caught:
        write(str(outside / "x.txt"), "no")
    message = str(caught.value)
    assert f"{outside / 'x.txt'} is outside the directories this session may write" in message
    assert f"PI_REPL_ALLOW_WRITE={outside}" in message
    assert not (outside / "x.txt").exists()
    # A symbolic link inside the project that leads out of it is refused too.
    (project / "escape").symlink_to(outside)
    with pytest.raises(PermissionError, match="resolves to it through a symbolic link"):
        write(str(project / "escape" / "y.txt"), "no")
    assert not (outside / "y.txt").exists()
    write(str(project / "inside.txt"), "yes")  # the project itself is writable
    monkeypatch.setenv("PI_REPL_ALLOW_WRITE", f"/nonexistent:{outside}")
    assert write(str(outside / "x.txt"), "allowed").startswith("Created")
    monkeypatch.setenv("PI_REPL_ALLOW_WRITE", "*")
    assert write(str(tmp_path / "anywhere.txt"), "allowed").startswith("Created")
