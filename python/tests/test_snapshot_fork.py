"""Saves from a forked child (``snapshot_fork``): the parent returns at once, learns the outcome
by reaping the child, and adopts a commit without believing anything it changed since the fork
was saved. A child that hangs or is killed never harms the committed snapshot.

Waits are on events: ``waitid(WNOWAIT)`` for the child's exit (without reaping it, so
``status`` still does), and FIFOs for "the child is inside this ``__reduce__``" and "go on".
"""

import os
import signal
import sys
import types

import pytest

from conftest import new_namespace
from pi_repl_kernel.snapshot import fork as snapshot_fork
from pi_repl_kernel.snapshot import saving as snapshot_save
from pi_repl_kernel.snapshot import store as snapshot_store


def wait_exit(pid):
    """Block until the child exits, leaving it to be reaped by ``status``."""
    os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)


def finish(store, pid):
    wait_exit(pid)
    result = snapshot_fork.status(store)
    assert result["running"] is False
    return result["finished"]


class Gate:
    """Two FIFOs: the child announces it reached ``__reduce__`` and then waits to be released."""

    def __init__(self, directory):
        self.reached = os.path.join(directory, "reached")
        self.release = os.path.join(directory, "release")
        os.mkfifo(self.reached)
        os.mkfifo(self.release)

    def wait_reached(self):
        with open(self.reached) as fifo:  # opens once the child opened its end
            return int(fifo.read())

    def open_release(self):
        with open(self.release, "w") as fifo:
            fifo.write("go")


BLOCKER = """
import os
class Blocker:
    def __init__(self, reached, release):
        self.reached, self.release = reached, release
    def __reduce__(self):
        with open(self.reached, "w") as fifo:
            fifo.write(str(os.getpid()))
        with open(self.release) as fifo:
            fifo.read()
        return (str, ("released",))
"""


@pytest.fixture
def store(session):
    namespace = new_namespace("kept = 'first'\nnumbers = [1, 2]")
    opened = session.open(namespace)
    assert snapshot_save.save(opened)["committed"]
    session.manifest_before = session.manifest()
    return opened


def test_a_background_save_commits_in_the_child_and_the_parent_adopts_it(session, store):
    store.namespace["numbers"].append(3)
    store.namespace["fresh"] = {"a": 1}
    started = snapshot_fork.start(store, hint_names=["numbers"])
    assert started["started"] and started["pid"] != os.getpid()
    assert snapshot_fork.start(store)["running"]  # at most one child at a time
    summary = finish(store, started["pid"])
    assert summary["committed"], summary
    assert summary["written"] == ["fresh", "numbers"]
    assert store.committed["generation"] == session.manifest()["generation"]
    revived, result, _ = session.revive()
    assert revived["numbers"] == [1, 2, 3] and revived["fresh"] == {"a": 1}
    # The parent believes exactly what the child saved: nothing is rewritten now.
    again = snapshot_save.save(store, hint_names=["numbers", "fresh", "kept"])
    assert again["written"] == [] and again["manifest_written"] is False


def test_changes_made_after_the_fork_stay_due(session, store, tmp_path):
    exec(BLOCKER, store.namespace)
    gate = Gate(str(tmp_path))
    store.namespace["zz_gate"] = store.namespace["Blocker"](gate.reached, gate.release)
    started = snapshot_fork.start(store)
    assert gate.wait_reached() == started["pid"]
    # While the child is blocked: the parent goes on and changes things.
    store.namespace["kept"] = "rebound after the fork"
    store.namespace["numbers"].append(99)
    store.namespace["later"] = 5
    gate.open_release()
    summary = finish(store, started["pid"])
    assert summary["committed"], summary
    # The fork's image was saved, not the parent's now (compared without reviving in this
    # process: cloudpickle would hand a revived class's methods to the live class).
    assert summary["written"] == ["Blocker", "os", "zz_gate"]
    stream = session.manifest()["bindings"]["kept"]["stream"]
    assert stream == session.manifest_before["bindings"]["kept"]["stream"]
    del store.namespace["zz_gate"]  # its __reduce__ would block this in-process save
    after = snapshot_save.save(store, hint_names=["numbers"])
    assert after["written"] == ["kept", "later", "numbers"]
    revived = session.revive()[0]
    assert revived["kept"] == "rebound after the fork" and revived["numbers"][-1] == 99


def test_a_value_rebound_while_a_child_saves_is_not_held_by_the_parent(session, store, tmp_path):
    """The parent keeps the objects bound at the fork for the child's commit, and a stored
    bytearray (no weak references) strongly; a value rebound meanwhile is let go at once, not
    when the commit is adopted (a rebuilt 8 GB buffer was held twice until then)."""
    store.namespace["blob"] = bytearray(b"old" * 1000)
    store.namespace["rows"] = [1, 2, 3]
    assert snapshot_save.save(store, hint_names=["blob", "rows"])["committed"]
    exec(BLOCKER, store.namespace)
    gate = Gate(str(tmp_path))
    store.namespace["zz_gate"] = store.namespace["Blocker"](gate.reached, gate.release)
    started = snapshot_fork.start(store)
    try:
        assert gate.wait_reached() == started["pid"]
        old, old_rows = store.namespace["blob"], store.namespace["rows"]
        store.namespace["blob"] = bytearray(b"new" * 1000)
        # this test's name, the argument, the fork's copy, the store
        held = sys.getrefcount(old)
        snapshot_store.let_go_of_rebound(store)  # what the next capture does first
        assert sys.getrefcount(old) == held - 2
        # Rebound after that, before the commit is adopted: adopting it lets go.
        store.namespace["rows"] = [4, 5]
        held_rows = sys.getrefcount(old_rows)
    finally:
        gate.open_release()
    summary = finish(store, started["pid"])
    assert summary["committed"], summary
    assert sys.getrefcount(old) == held - 2, "adopting the commit holds it no more"
    assert sys.getrefcount(old_rows) == held_rows - 2
    assert not store.tracked["blob"].holds(old)
    del store.namespace["zz_gate"]  # its __reduce__ would block this in-process save
    assert {"blob", "rows"} <= set(snapshot_save.save(store, hint_names=["blob"])["written"])
    revived = session.revive()[0]
    assert revived["blob"] == bytearray(b"new" * 1000) and revived["rows"] == [4, 5]


def test_a_child_that_waited_saves_against_what_the_one_before_it_committed(
        session, store, tmp_path):
    # The kernel's record says `kept` is stored as the object 'first'. A capture saves another
    # value; before it commits, `kept` is bound back to that very object and a second capture
    # waits behind the first. Once the first commits 'intermediate', the second must not trust
    # the kernel's older record ("'first' is stored, skip it").
    original = store.namespace["kept"]
    exec(BLOCKER, store.namespace)
    gate = Gate(str(tmp_path))
    store.namespace["zz_gate"] = store.namespace["Blocker"](gate.reached, gate.release)
    store.namespace["kept"] = "intermediate"
    first = snapshot_fork.start(store, capture=True)
    assert gate.wait_reached() == first["pid"]  # it holds the save lock while it pickles
    store.namespace["kept"] = original
    del store.namespace["zz_gate"], store.namespace["Blocker"]
    second = snapshot_fork.start(store, capture=True)
    assert second["waits_for"] == first["pid"]
    gate.open_release()
    before = finish(store, first["pid"])  # the second may commit at once after it
    assert before["committed"] and "kept" in before["written"], before
    summary = finish(store, second["pid"])
    assert summary["committed"], summary
    assert "kept" in summary["written"]
    assert session.manifest()["bindings"]["kept"]["stream"] == \
        session.manifest_before["bindings"]["kept"]["stream"]
    assert session.revive()[0]["kept"] == "first"


def test_a_replaced_waiting_child_is_not_waited_for_and_its_leftovers_go_once_reaped(
        session, store, tmp_path):
    # A capture while a save runs forks a child that waits; a newer capture kills that one and
    # returns without waiting for it to die. Once dead, the next status reaps it and removes
    # the report it left; the child that replaced it removes its temp files once it holds the
    # lock (not the capture: listing the blob directories would delay the answer).
    exec(BLOCKER, store.namespace)
    gate = Gate(str(tmp_path))
    store.namespace["zz_gate"] = store.namespace["Blocker"](gate.reached, gate.release)
    first = snapshot_fork.start(store, capture=True)
    assert gate.wait_reached() == first["pid"]
    del store.namespace["zz_gate"], store.namespace["Blocker"]
    store.namespace["kept"] = "second"
    second = snapshot_fork.start(store, capture=True)
    store.namespace["kept"] = "third"
    third = snapshot_fork.start(store, capture=True)
    assert third["replaced"] == second["pid"] and third["waits_for"] == first["pid"]
    assert [pid for pid, _ in store.dying] == [second["pid"]]
    temp = os.path.join(session.state_dir, f".manifest-{second['pid']}-1.tmp")
    report = snapshot_fork.report_path(store, second["pid"])
    for path in (temp, report):
        with open(path, "w") as file:
            file.write("left by the killed child")
    wait_exit(second["pid"])
    assert snapshot_fork.status(store)["running"] is True  # the first still pickles
    assert store.dying == []
    with pytest.raises(ChildProcessError):
        os.waitpid(second["pid"], os.WNOHANG)  # reaped
    assert not os.path.exists(report)
    assert os.path.exists(temp)  # the third waits for the lock; it removes this then
    gate.open_release()
    assert finish(store, first["pid"])["committed"]
    summary = finish(store, third["pid"])
    assert summary["committed"], summary
    assert not os.path.exists(temp)
    assert session.revive()[0]["kept"] == "third"


def test_a_save_child_gives_way_to_the_kernel(session, store, tmp_path):
    # The save works in the background: it runs niced, so a busy machine serves the kernel's
    # next answer first.
    exec(BLOCKER, store.namespace)
    gate = Gate(str(tmp_path))
    store.namespace["zz_gate"] = store.namespace["Blocker"](gate.reached, gate.release)
    started = snapshot_fork.start(store)
    assert gate.wait_reached() == started["pid"]

    def niceness(pid):
        with open(f"/proc/{pid}/stat") as file:
            return int(file.read().rsplit(")", 1)[1].split()[16])

    expected = min(19, niceness(os.getpid()) + snapshot_fork.CHILD_NICENESS)
    assert niceness(started["pid"]) == expected
    gate.open_release()
    assert finish(store, started["pid"])["committed"]


def test_a_hanging_child_is_killed_and_nothing_breaks(session, store, tmp_path):
    exec(BLOCKER, store.namespace)
    gate = Gate(str(tmp_path))
    store.namespace["kept"] = "never committed"
    store.namespace["zz_gate"] = store.namespace["Blocker"](gate.reached, gate.release)
    started = snapshot_fork.start(store)
    gate.wait_reached()
    assert snapshot_fork.status(store)["running"] is True
    summary = snapshot_fork.status(store, kill=True)["finished"]
    assert summary["committed"] is False and summary["killed"] is True
    assert "did not finish" in summary["error"]
    with pytest.raises(ChildProcessError):
        os.waitpid(started["pid"], os.WNOHANG)  # reaped
    assert session.manifest() == session.manifest_before
    assert not [n for n in os.listdir(session.state_dir) if ".tmp-" in n]
    # The next save (in-process here) starts from what the parent believed.
    del store.namespace["zz_gate"]
    saved = snapshot_save.save(store)
    assert saved["committed"] and "kept" in saved["written"]
    assert session.revive()[0]["kept"] == "never committed"


def test_a_child_killed_by_sigkill_is_reported_and_the_snapshot_stands(session, store, tmp_path):
    exec(BLOCKER, store.namespace)
    gate = Gate(str(tmp_path))
    store.namespace["big"] = bytearray(os.urandom(1 << 20))  # a raw blob on its way to disk
    store.namespace["zz_gate"] = store.namespace["Blocker"](gate.reached, gate.release)
    started = snapshot_fork.start(store)
    gate.wait_reached()
    os.kill(started["pid"], signal.SIGKILL)
    summary = finish(store, started["pid"])
    assert summary["committed"] is False and "SIGKILL" in summary["error"]
    assert session.manifest() == session.manifest_before
    revived, result, _ = session.revive()
    assert result["failed"] == {} and revived["kept"] == "first"
    del store.namespace["zz_gate"]
    again = snapshot_fork.start(store)
    summary = finish(store, again["pid"])
    assert summary["committed"] and "big" in summary["written"]
    assert session.revive()[0]["big"] == store.namespace["big"]


def test_fork_disallowed_saves_in_process_and_says_so(session, store):
    store.namespace["kept"] = "in process"
    summary = snapshot_fork.start(store, allowed=False)
    assert summary["committed"] and "PI_REPL_SNAPSHOT_FORK=0" in summary["in_process"]
    assert store.child is None
    assert session.revive()[0]["kept"] == "in process"


def test_initialised_cuda_saves_in_process(store, monkeypatch):
    # torch is not installed here: a stand-in module answers the one question asked.
    fake = types.SimpleNamespace(cuda=types.SimpleNamespace(is_initialized=lambda: True))
    monkeypatch.setitem(sys.modules, "torch", fake)
    summary = snapshot_fork.start(store)
    assert summary["committed"] and "CUDA" in summary["in_process"]


def test_a_save_is_skipped_when_free_memory_is_below_the_kernels_size(store, monkeypatch):
    # /proc figures replaced: this machine has plenty of memory.
    figures = {"MemAvailable:": 100 * 1024, "VmRSS:": 600 * 1024}
    monkeypatch.setattr(snapshot_fork, "_proc_kib", lambda path, field: figures[field])
    summary = snapshot_fork.start(store)
    assert summary["committed"] is False and store.child is None
    assert "100 MiB" in summary["low_memory"] and "600 MiB" in summary["low_memory"]
    figures["MemAvailable:"] = 700 * 1024
    started = snapshot_fork.start(store)
    assert finish(store, started["pid"])["committed"]


def test_a_child_reaped_by_other_code_still_reports_through_its_file(session, store):
    store.namespace["kept"] = "reaped elsewhere"
    started = snapshot_fork.start(store)
    os.waitpid(started["pid"], 0)  # user code calling os.wait() in a cell
    summary = snapshot_fork.status(store)["finished"]
    assert summary["committed"], summary
    assert session.revive()[0]["kept"] == "reaped elsewhere"


def test_the_child_prints_nothing_to_the_parents_output(store, capfd):
    exec("class Loud:\n    def __reduce__(self):\n        print('LOUD'); import sys; "
         "print('ERR', file=sys.stderr); import os; os.write(1, b'FD1')\n"
         "        return (str, ('x',))", store.namespace)
    store.namespace["loud"] = store.namespace["Loud"]()
    started = snapshot_fork.start(store)
    assert finish(store, started["pid"])["committed"]
    out, err = capfd.readouterr()
    assert "LOUD" not in out and "FD1" not in out and "ERR" not in err


def test_a_sub_agents_fork_adopts_a_running_save_child_and_keeps_its_summary_for_the_host(
    session, store, monkeypatch
):
    from pi_repl_kernel import snapshot

    monkeypatch.setattr(snapshot, "_store", store)
    store.namespace["numbers"].append(3)
    started = snapshot_fork.start(store)
    store.namespace["after_fork"] = "made while the save child ran"
    summary = snapshot.save_for_fork()
    assert summary["committed"], summary
    assert summary["written"] == ["after_fork"], "the child's commit was adopted first"
    # The host's next save_status still learns what its save child did, once.
    status = snapshot.save_status()
    assert status["running"] is False
    assert status["finished"]["committed"] and status["finished"]["pid"] == started["pid"]
    assert snapshot.save_status() == {"running": False}
    revived = session.revive()[0]
    assert revived["numbers"] == [1, 2, 3]
    assert revived["after_fork"] == "made while the save child ran"
