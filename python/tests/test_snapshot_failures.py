"""A binding that cannot be saved or revived costs only itself, and is named with a reason.

The unpickles that hang, exit or crash run in child processes of this test, which plays the
host: a restore in another child of the same host sees that the kernel died while the host lived
and skips that binding (``poisoned``) while the others revive. A restore under a different host
(the first one was killed, taking its kernel with it) treats the unfinished revive as one strike
only: the binding is tried again, and poisoned only if that is cut short too.
"""

import ctypes
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import CHILD_RESTORE, PYTHON_DIR, new_namespace, run_child
from eventually import eventually
from pi_repl_kernel.snapshot import saving as snapshot_save
from pi_repl_kernel.snapshot.journal import REASON_KERNEL_DIED, REASON_TWICE


class RaisesOnLoad:
    def __reduce__(self):
        return (divmod, (1, 0))


class ExitsOnLoad:
    def __reduce__(self):
        return (os._exit, (7,))


class CrashesOnLoad:
    def __reduce__(self):
        return (ctypes.string_at, (0,))  # reads address 0: SIGSEGV


class HangsOnLoad:
    def __reduce__(self):
        return (time.sleep, (3600,))


class HangsWhileFlagged:
    """Unpickling hangs while the file ``flag`` exists, and gives ``"loaded"`` otherwise."""

    def __init__(self, flag):
        self.flag = flag

    def __reduce__(self):
        code = (f"__import__('time').sleep(3600) if __import__('os').path.exists({self.flag!r}) "
                "else 'loaded'")
        return (eval, (code,))


class InterruptsItsOwnReduce:
    def __reduce__(self):
        raise KeyboardInterrupt


class ExitsItsOwnReduce:
    def __reduce__(self):
        raise SystemExit(3)


def test_unpicklable_bindings_are_skipped_with_a_reason(session):
    namespace = new_namespace("""
        import threading
        lock = threading.Lock()
        gen = (i for i in range(3))
        kept = [1, 2]
    """)
    namespace["interrupts"] = InterruptsItsOwnReduce()
    namespace["exits"] = ExitsItsOwnReduce()
    store = session.open(namespace)
    summary = snapshot_save.save(store)
    assert summary["skipped"] == {
        "lock": "cannot pickle '_thread.lock' object",
        "gen": "cannot pickle 'generator' object",
        "interrupts": "KeyboardInterrupt raised by the object itself",
        "exits": "SystemExit: 3",
    }
    revived, result, _ = session.revive()
    assert revived["kept"] == [1, 2]
    assert set(result["unsaved"]) == {"lock", "gen", "interrupts", "exits"}


def test_a_binding_whose_unpickle_raises_fails_alone_and_stays_in_the_snapshot(session):
    namespace = new_namespace("kept = {'a': 1}")
    namespace["broken"] = RaisesOnLoad()
    snapshot_save.save(session.open(namespace))
    revived, result, store = session.revive()
    assert result["failed"] == {"broken": "ZeroDivisionError: integer division or modulo by zero"}
    assert revived["kept"] == {"a": 1} and "broken" not in revived
    snapshot_save.save(store)  # the failed binding is carried, not lost
    assert "broken" in session.manifest()["bindings"]


@pytest.mark.parametrize("bad_value, how", [
    (ExitsOnLoad(), "exit"),
    (CrashesOnLoad(), "segfault"),
    (HangsOnLoad(), "hang"),
])
def test_a_binding_that_kills_the_kernel_is_poisoned_and_skipped_next_time(session, bad_value,
                                                                           how):
    namespace = new_namespace("""
        def helper():
            return "ok"
        numbers = list(range(10))
    """)
    namespace["zz_bad"] = bad_value
    snapshot_save.save(session.open(namespace))

    child = _start_child_restore(session)
    if how == "hang":
        _wait_for_journal_line(session, "start zz_bad")
        child.kill()
    child.wait(timeout=30)
    assert child.returncode != 0
    expected_code = {"exit": 7, "segfault": -signal.SIGSEGV, "hang": -signal.SIGKILL}[how]
    assert child.returncode == expected_code

    same_host = _child_restore(session)  # the host that saw its kernel die starts another
    assert same_host["poisoned"] == {"zz_bad": REASON_KERNEL_DIED}
    assert sorted(same_host["revived"]) == ["helper", "numbers"]

    revived, result, store = session.revive()
    assert result["status"] == "ok" and result["poisoned"] == {"zz_bad": REASON_KERNEL_DIED}
    assert revived["helper"]() == "ok" and revived["numbers"] == list(range(10))
    assert "zz_bad" not in revived

    snapshot_save.save(store)  # still poisoned next time: the value was not saved anew
    assert session.revive()[1]["poisoned"].keys() == {"zz_bad"}


def test_saving_a_new_value_clears_the_poisoned_mark(session):
    namespace = new_namespace("fine = 1")
    namespace["bad"] = ExitsOnLoad()
    snapshot_save.save(session.open(namespace))
    assert _start_child_restore(session).wait(timeout=30) == 7
    assert list(_child_restore(session)["poisoned"]) == ["bad"]
    revived, result, store = session.revive()
    assert list(result["poisoned"]) == ["bad"]
    revived["bad"] = "a harmless new value"
    snapshot_save.save(store)
    with open(os.path.join(session.state_dir, "poisoned.json")) as file:
        assert json.load(file) == {}
    again, result, _ = session.revive()
    assert result["poisoned"] == {} and again["bad"] == "a harmless new value"


def test_a_host_killed_during_a_revive_is_no_evidence_against_the_binding(session, tmp_path):
    flag = tmp_path / "hang"
    flag.touch()
    namespace = new_namespace("fine = 1")
    namespace["data"] = HangsWhileFlagged(str(flag))
    snapshot_save.save(session.open(namespace))
    _kill_host_while_reviving(session, "data")
    flag.unlink()
    revived, result, _ = session.revive()  # another host
    assert result["poisoned"] == {} and result["failed"] == {}
    assert revived["data"] == "loaded" and revived["fine"] == 1


def test_a_binding_is_poisoned_after_two_revives_in_a_row_are_cut_short(session, tmp_path):
    flag = tmp_path / "hang"
    flag.touch()
    namespace = new_namespace("fine = 1")
    namespace["data"] = HangsWhileFlagged(str(flag))
    snapshot_save.save(session.open(namespace))
    _kill_host_while_reviving(session, "data")
    flag.unlink()
    assert session.revive()[0]["data"] == "loaded"  # a finished revive forgets the strike
    flag.touch()
    _kill_host_while_reviving(session, "data")
    _kill_host_while_reviving(session, "data")
    revived, result, store = session.revive()
    assert result["poisoned"] == {"data": REASON_TWICE}
    assert "data" not in revived and revived["fine"] == 1
    revived["data"] = "saved anew"
    snapshot_save.save(store)
    again, result, _ = session.revive()
    assert result["poisoned"] == {} and again["data"] == "saved anew"


def test_the_journal_is_emptied_by_the_next_restore(session):
    snapshot_save.save(session.open(new_namespace("value = [1, 2]")))
    for _ in range(3):
        assert session.revive()[0]["value"] == [1, 2]
    with open(os.path.join(session.state_dir, "journal")) as file:
        assert file.read().splitlines()[1:] == ["start value", "done value"]


def _kill_host_while_reviving(session, name):
    """Start a host process whose kernel (its child) revives the session; once the journal shows
    the unpickle of ``name`` under way, SIGKILL the host and its kernel together."""
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR)
    host_code = ("import subprocess, sys\n"
                 "subprocess.run([sys.executable, '-c', sys.argv[1], *sys.argv[2:]])")
    earlier_hosts = {line for line in _journal_lines(session) if line.startswith("host ")}
    host = subprocess.Popen([sys.executable, "-c", host_code, textwrap.dedent(CHILD_RESTORE),
                             session.state_dir, session.key_file],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        _wait_for_journal(session, lambda lines: _started_under_a_new_host(
            lines, f"start {name}", earlier_hosts), f"start {name} under a new host")
    finally:
        os.killpg(host.pid, signal.SIGKILL)
        host.wait(timeout=30)


def _child_restore(session):
    child = run_child(CHILD_RESTORE, session.state_dir, session.key_file)
    assert child.returncode == 0, child.stderr
    return json.loads(child.stdout)


def _start_child_restore(session):
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR)
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(CHILD_RESTORE),
                             session.state_dir, session.key_file],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _wait_for_journal_line(session, line):
    _wait_for_journal(session, lambda lines: line in lines, repr(line))


def _wait_for_journal(session, done, what, timeout=20):
    """Poll the journal (the only sign of a revive's progress) until ``done(lines)``."""
    eventually(lambda: done(_journal_lines(session)), f"the journal shows {what}", timeout)


def _journal_lines(session):
    try:
        with open(os.path.join(session.state_dir, "journal")) as file:
            return file.read().splitlines()
    except FileNotFoundError:
        return []


def _started_under_a_new_host(lines, start_line, earlier_hosts):
    if not earlier_hosts:
        return start_line in lines
    host = None
    for line in lines:
        if line.startswith("host "):
            host = line
        elif line == start_line and host is not None and host not in earlier_hosts:
            return True
    return False


def test_a_child_restore_reports_json_for_a_healthy_snapshot(session):
    snapshot_save.save(session.open(new_namespace("value = 5")))
    child = run_child(CHILD_RESTORE, session.state_dir, session.key_file)
    assert child.returncode == 0, child.stderr
    result = json.loads(child.stdout)
    assert result["status"] == "ok" and result["revived"] == ["value"]


def test_a_mark_left_by_an_older_version_counts_as_one_strike_and_heals(session):
    snapshot_save.save(session.open(new_namespace("data = ['a', 'b']")))
    stream = session.manifest()["bindings"]["data"]["stream"]["id"]
    with open(os.path.join(session.state_dir, "poisoned.json"), "w") as file:
        json.dump({"data": {"stream": stream, "reason": "crashed, exited or hung the kernel "
                            "while reviving (skipped)"}}, file)
    revived, result, _ = session.revive()
    assert result["poisoned"] == {} and revived["data"] == ["a", "b"]
    with open(os.path.join(session.state_dir, "poisoned.json")) as file:
        assert json.load(file) == {}  # the finished revive forgot the strike


def test_blobs_of_a_first_save_that_never_committed_are_no_lost_manifest(session):
    """A kill during the very first save leaves blobs and no manifest: that is no snapshot yet,
    not a deleted one; once a manifest was committed, a missing one is refused and set aside."""
    namespace = new_namespace("data = list(range(1000))")
    store = session.open(namespace)
    assert session.save(store)["committed"]
    os.remove(session.manifest_path)
    os.remove(os.path.join(session.state_dir, "committed"))  # as if it had never committed
    _, result, _ = session.revive()
    assert result["status"] == "none", result
    assert "partial blob(s) are discarded" in result["reason"]

    store = session.open(namespace)
    assert session.save(store)["committed"]
    os.remove(session.manifest_path)
    _, result, _ = session.revive()
    assert result["status"] == "refused", result
    assert "the snapshot manifest is missing while" in result["reason"]
