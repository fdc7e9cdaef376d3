"""A binding that cannot be saved or revived costs only itself, and is named with a reason.

The unpickles that hang, exit or crash run in child processes: the journal makes the next
restore skip that binding (``poisoned``) while the others revive.
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
from pi_repl_kernel import snapshot_save


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

    revived, result, store = session.revive()
    assert result["status"] == "ok"
    assert result["poisoned"] == {
        "zz_bad": "crashed, exited or hung the kernel while reviving (skipped)"}
    assert revived["helper"]() == "ok" and revived["numbers"] == list(range(10))
    assert "zz_bad" not in revived

    snapshot_save.save(store)  # still poisoned next time: the value was not saved anew
    assert session.revive()[1]["poisoned"].keys() == {"zz_bad"}


def test_saving_a_new_value_clears_the_poisoned_mark(session):
    namespace = new_namespace("fine = 1")
    namespace["bad"] = ExitsOnLoad()
    snapshot_save.save(session.open(namespace))
    assert _start_child_restore(session).wait(timeout=30) == 7
    revived, result, store = session.revive()
    assert list(result["poisoned"]) == ["bad"]
    revived["bad"] = "a harmless new value"
    snapshot_save.save(store)
    with open(os.path.join(session.state_dir, "poisoned.json")) as file:
        assert json.load(file) == {}
    again, result, _ = session.revive()
    assert result["poisoned"] == {} and again["bad"] == "a harmless new value"


def _start_child_restore(session):
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR)
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(CHILD_RESTORE),
                             session.state_dir, session.key_file],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _wait_for_journal_line(session, line, timeout=20):
    path = os.path.join(session.state_dir, "journal")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.exists(path):
            with open(path) as file:
                if line in file.read().splitlines():
                    return
        time.sleep(0.01)
    raise AssertionError(f"the journal never showed {line!r}")


def test_a_child_restore_reports_json_for_a_healthy_snapshot(session):
    snapshot_save.save(session.open(new_namespace("value = 5")))
    child = run_child(CHILD_RESTORE, session.state_dir, session.key_file)
    assert child.returncode == 0, child.stderr
    result = json.loads(child.stdout)
    assert result["status"] == "ok" and result["revived"] == ["value"]
