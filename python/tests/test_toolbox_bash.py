"""The default ``bash`` helper, loaded the way a kernel loads it.

Process checks read ``/proc``: a zombie (a dead process its parent has not reaped yet; in some
containers nobody reaps orphans) counts as gone.
"""

import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from eventually import eventually, poll

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pi_repl_kernel import helpers  # noqa: E402

TOOLBOX = Path(helpers.__file__).parent / "toolbox"

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="process checks read /proc")


@pytest.fixture(scope="module")
def toolbox():
    namespace = {}
    record = helpers.load(str(TOOLBOX / "bash.py"), namespace)
    assert record["error"] is None, record["error"]
    return namespace, sys.modules["pi_repl_helpers.bash"]


@pytest.fixture
def bash(toolbox):
    return toolbox[0]["bash"]


def stat_fields(pid):
    """(state, pgrp) of a process, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rpartition(b")")[2].split()
    except FileNotFoundError:
        return None
    return fields[0].decode(), int(fields[2])


def alive(pid):
    fields = stat_fields(pid)
    return fields is not None and fields[0] not in ("Z", "X")


def live_members(group):
    members = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            fields = stat_fields(int(name))
            if fields and fields[1] == group and fields[0] not in ("Z", "X"):
                members.append(int(name))
    return members


def _comm(pid):
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except FileNotFoundError:
        return ""


def wait_for_file(path, deadline=10.0):
    def written():
        return path.exists() and path.read_text().strip()

    return eventually(written, f"{path} written", deadline)


def test_a_failing_command_returns_its_status_with_stdout_and_stderr_apart(bash):
    result = bash("echo out; echo err >&2; exit 3")
    assert isinstance(result, subprocess.CompletedProcess)
    assert (result.args, result.returncode, result.stdout, result.stderr) == (
        "echo out; echo err >&2; exit 3",
        3,
        "out\n",
        "err\n",
    )
    with pytest.raises(subprocess.CalledProcessError):
        result.check_returncode()  # the documented way to make a failure raise
    assert bash("kill -TERM $$").returncode == -signal.SIGTERM


def test_cwd_defaults_to_the_current_directory_and_can_be_given(tmp_path, monkeypatch, bash):
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path)
    assert bash("pwd").stdout.strip() == str(tmp_path)
    assert bash("pwd", cwd="sub").stdout.strip() == str(tmp_path / "sub")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        bash("pwd", cwd=str(tmp_path / "missing"))


def test_stdin_is_empty_and_the_command_has_its_own_process_group(bash):
    started = time.monotonic()
    assert bash("cat").stdout == ""  # would wait forever on a terminal or a pipe
    assert time.monotonic() - started < 5
    fields = bash("cat /proc/self/stat").stdout.rpartition(")")[2].split()
    assert int(fields[2]) != os.getpgrp()


def test_a_timeout_returns_what_ran_with_a_note_and_ends_the_grandchildren(tmp_path, bash):
    pidfile = tmp_path / "sleep.pid"
    started = time.monotonic()
    result = bash(f"echo started; sh -c 'sleep 30 & echo $! > {pidfile}; wait'", timeout=1)
    assert time.monotonic() - started < 10
    assert result.timed_out and result.returncode == -signal.SIGTERM
    assert result.stdout == "started\n"
    assert result.output.startswith("started\n[bash(): timed out after 1 s; the command and its ")
    sleeper = int(pidfile.read_text())
    assert not alive(sleeper), "the sleep under sh -c was killed with its group"


def test_a_command_ignoring_sigterm_is_killed_after_the_grace(tmp_path, bash, toolbox):
    pidfile = tmp_path / "stubborn.pid"
    started = time.monotonic()
    result = bash(f"trap '' TERM; sleep 30 & echo $! > {pidfile}; wait", timeout=0.5)
    elapsed = time.monotonic() - started
    assert result.timed_out and result.returncode == -signal.SIGKILL
    assert elapsed >= 0.5 + toolbox[1].KILL_GRACE * 0.9, "SIGTERM was ignored, so the grace ran out"
    assert elapsed < 10
    assert not alive(int(pidfile.read_text()))


def test_an_interrupt_ends_every_process_of_the_group_before_it_propagates(tmp_path, bash):
    pidfile = tmp_path / "sh.pid"
    seen = {}

    def interrupt():
        shell = int(wait_for_file(pidfile))
        group = stat_fields(shell)[1]
        seen["group"] = group
        def sleep_started():  # sh has started its sleep
            seen["members"] = live_members(group)
            seen["names"] = [_comm(pid) for pid in seen["members"]]
            return "sleep" in seen["names"]

        poll(sleep_started, 10)  # asserted below, after the interrupt
        os.kill(os.getpid(), signal.SIGINT)  # what the host's interrupt does to the kernel

    timer = threading.Thread(target=interrupt)
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            bash(f"sh -c 'echo $$ > {pidfile}; sleep 30'")
    finally:
        timer.join()
    assert "sleep" in seen["names"], "the sleep under sh -c was running in the command's group"
    assert seen["group"] != os.getpgrp()
    assert [pid for pid in seen["members"] if alive(pid)] == []
    assert live_members(seen["group"]) == []


def test_stdout_and_stderr_are_one_interleaved_record_and_apart(bash):
    result = bash("echo one; sleep 0.2; echo two >&2; sleep 0.2; echo three", echo=False)
    assert result.output == "one\ntwo\nthree\n"
    assert (result.stdout, result.stderr) == ("one\nthree\n", "two\n")


def test_output_streams_to_the_cell_while_the_command_runs(tmp_path, bash, capsys):
    gate = tmp_path / "gate"
    seen = {}

    def watch():
        # The first line reaches the cell's stdout while the command still waits for the gate.
        def first_line_seen():
            seen["out"] = seen.get("out", "") + capsys.readouterr().out
            return "first" in seen["out"]

        poll(first_line_seen, 30)  # asserted below, once the command ended
        gate.write_text("open")

    watcher = threading.Thread(target=watch)
    watcher.start()
    result = bash(f"echo first; while [ ! -s {gate} ]; do sleep 0.05; done; echo second")
    watcher.join()
    assert seen["out"] == "first\n", "echoed before the command finished"
    assert capsys.readouterr().out == "second\n"
    assert result.output == "first\nsecond\n"
    assert bash("echo quiet", echo=False).stdout == "quiet\n" and capsys.readouterr().out == ""


def test_a_big_output_keeps_a_tail_and_writes_the_whole_to_a_file(bash, toolbox, capsys):
    module = toolbox[1]
    result = bash("seq 1 100000; echo done >&2")
    assert result.returncode == 0
    lines = result.output.splitlines()
    assert lines[0].startswith("[bash(): output was 588,900 bytes; showing its last ")
    assert lines[0].endswith(f"Full output: {result.full_output}]")
    assert len(lines) == module.MAX_OUTPUT_LINES + 1 and lines[-1] == "done"
    with open(result.full_output) as whole:
        assert whole.read() == "".join(f"{n}\n" for n in range(1, 100001)) + "done\n"
    assert result.stdout.endswith("99999\n100000\n") and result.stderr == "done\n"
    echoed = capsys.readouterr().out
    assert len(echoed) < module.ECHO_BYTES + 300 and "echo stops after 20 KiB" in echoed
    os.unlink(result.full_output)


def test_a_background_job_holding_the_pipes_does_not_block_the_return(tmp_path, bash):
    pidfile = tmp_path / "bg.pid"
    started = time.monotonic()
    result = bash(f"sleep 20 & echo $! > {pidfile}; echo launched")
    elapsed = time.monotonic() - started
    sleeper = int(pidfile.read_text())
    try:
        assert elapsed < 5
        assert result.stdout == "launched\n"
        assert "background process still holds its output" in result.stderr
        assert alive(sleeper), "a normal return leaves background jobs running"
    finally:
        os.kill(sleeper, signal.SIGKILL)


def test_the_result_displays_what_was_not_echoed_and_pickles_as_a_plain_completed_process(bash):
    pretty = pytest.importorskip("IPython.lib.pretty")
    result = bash("printf 'a\\nb\\n'; echo oops >&2; exit 3")
    assert repr(result).startswith("CompletedProcess(args=")
    assert pretty.pretty(result) == "[exit status 3]"  # the output was echoed as it came
    quiet = bash("printf 'a\\nb\\n'", echo=False)
    assert pretty.pretty(quiet) == "a\nb\n[exit status 0]"
    revived = pickle.loads(pickle.dumps(result))
    assert type(revived) is subprocess.CompletedProcess
    assert (revived.output, revived.full_output, revived.timed_out) == ("a\nb\noops\n", None, False)
    assert (revived.args, revived.returncode, revived.stdout, revived.stderr) == (
        result.args,
        3,
        "a\nb\n",
        "oops\n",
    )


def test_bad_arguments_are_refused_before_anything_runs(bash):
    with pytest.raises(TypeError, match="shlex.join"):
        bash(["echo", "hi"])
    with pytest.raises(ValueError, match="timeout"):
        bash("echo hi", timeout=0)


def test_an_interrupt_while_the_command_starts_still_ends_it(tmp_path, bash, monkeypatch):
    """SIGINT landing after the child exists but before Popen returned (a loaded machine) is
    held until the pid is known, then raised: the command does not outlive the cell."""
    real_popen = subprocess.Popen
    started = {}

    def popen_then_interrupt(*args, **kwargs):
        process = real_popen(*args, **kwargs)
        started["pid"] = process.pid
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)  # the Python-level handler runs here, inside "Popen"
        return process

    monkeypatch.setattr(subprocess, "Popen", popen_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        bash("sleep 30")
    monkeypatch.undo()
    assert not alive(started["pid"])
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored
