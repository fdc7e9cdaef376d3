"""The host's SIGINT preempts a save: the last snapshot stays intact and loadable, no temp file is
left, and the next save works without believing that unwritten bindings were saved."""

import os
import signal
import threading
import time

import pytest

from conftest import new_namespace
from pi_repl_kernel.snapshot import blobs as snapshot_blobs
from pi_repl_kernel.snapshot import manifest as snapshot_manifest
from pi_repl_kernel.snapshot import saving as snapshot_save


class SignalsTheProcess:
    """Its ``__reduce__`` delivers a real SIGINT to this process, as the host would."""

    def __init__(self, swallow=False):
        self.swallow = swallow

    def __reduce__(self):
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)  # the signal lands here
        except KeyboardInterrupt:
            if not self.swallow:
                raise
        return (str, ("never used",))


class SlowReduce:
    def __reduce__(self):
        time.sleep(0.01)
        return (int, (1,))


@pytest.fixture
def committed(session):
    """A session with one committed snapshot and its open store."""
    namespace = new_namespace("first = 'committed'\nnumbers = [1, 2]")
    store = session.open(namespace)
    snapshot_save.save(store)
    session.namespace, session.store_ = namespace, store
    session.manifest_before = session.manifest()
    return session


def _assert_previous_snapshot_intact(session):
    assert session.manifest() == session.manifest_before
    assert not [name for name in session.blob_files() if name.startswith(".tmp-")]
    assert not [name for name in os.listdir(session.state_dir) if ".tmp-" in name]
    revived, result, _ = session.revive()
    assert result["status"] == "ok" and result["failed"] == {}
    assert revived["first"] == "committed" and revived["numbers"] == [1, 2]


def test_a_sigint_while_pickling_preempts_the_save(committed):
    committed.namespace["numbers"].append(3)
    committed.namespace["zz_interrupt"] = SignalsTheProcess()
    with pytest.raises(KeyboardInterrupt):
        snapshot_save.save(committed.store_)
    _assert_previous_snapshot_intact(committed)

    del committed.namespace["zz_interrupt"]
    summary = snapshot_save.save(committed.store_)
    assert summary["written"] == ["numbers"]  # not believed saved by the preempted save
    assert committed.revive()[0]["numbers"] == [1, 2, 3]


def test_a_reduce_that_swallows_the_hosts_sigint_still_stops_the_save(committed):
    committed.namespace["zz_swallow"] = SignalsTheProcess(swallow=True)
    with pytest.raises(KeyboardInterrupt):
        snapshot_save.save(committed.store_)
    _assert_previous_snapshot_intact(committed)


def test_a_sigint_from_a_timer_thread_preempts_a_long_save(committed):
    for index in range(100):
        committed.namespace[f"slow_{index:03}"] = SlowReduce()
    timer = threading.Timer(0.1, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            snapshot_save.save(committed.store_)
    finally:
        timer.join()
    _assert_previous_snapshot_intact(committed)
    summary = snapshot_save.save(committed.store_)
    assert summary["committed"] and len(summary["written"]) == 100


def test_a_sigint_while_writing_a_blob_removes_its_temp_file(committed, monkeypatch):
    real_write = snapshot_blobs.BlobStore.write

    def write_then_interrupt(self, name, data):
        real_fsync = os.fsync

        def fsync_and_signal(fd):
            real_fsync(fd)
            os.kill(os.getpid(), signal.SIGINT)  # lands before the rename

        monkeypatch.setattr(os, "fsync", fsync_and_signal)
        try:
            return real_write(self, name, data)
        finally:
            monkeypatch.setattr(os, "fsync", real_fsync)

    monkeypatch.setattr(snapshot_blobs.BlobStore, "write", write_then_interrupt)
    committed.namespace["numbers"].append(3)
    with pytest.raises(KeyboardInterrupt):
        snapshot_save.save(committed.store_)
    monkeypatch.undo()
    _assert_previous_snapshot_intact(committed)
    summary = snapshot_save.save(committed.store_)
    assert summary["written"] == ["numbers"]


def test_a_sigint_during_the_commit_lets_the_commit_stand_and_report_itself(committed,
                                                                            monkeypatch):
    real_write = snapshot_manifest.write

    def signal_then_write(state_dir, body, key):
        os.kill(os.getpid(), signal.SIGINT)  # arrives inside the critical section
        real_write(state_dir, body, key)

    monkeypatch.setattr(snapshot_manifest, "write", signal_then_write)
    committed.namespace["numbers"].append(3)
    result = snapshot_save.save(committed.store_)
    assert result["committed"] is True and result["manifest_written"] is True
    monkeypatch.undo()
    assert committed.manifest()["generation"] == committed.manifest_before["generation"] + 1
    assert committed.revive()[0]["numbers"] == [1, 2, 3]
    again = snapshot_save.save(committed.store_)
    assert again["written"] == [] and again["manifest_written"] is False


def test_the_previous_sigint_handler_is_restored_after_a_save(committed):
    before = signal.getsignal(signal.SIGINT)
    snapshot_save.save(committed.store_)
    assert signal.getsignal(signal.SIGINT) is before


class CreatesThePreemptFile:
    """Its ``__reduce__`` asks for preemption the way the host does: by creating the file."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        open(self.path, "w").close()
        return (int, (1,))


def test_the_preempt_file_stops_a_save_cleanly_at_the_next_binding(committed):
    from pi_repl_kernel import snapshot

    store = committed.store_
    committed.namespace["numbers"].append(3)
    committed.namespace["aa_ask"] = CreatesThePreemptFile(store.preempt_path)
    committed.namespace["zz_later"] = [4, 5, 6]
    snapshot._store = store
    try:
        result = snapshot.save()
    finally:
        snapshot._store = None
    assert result == {"committed": False, "preempted": True}
    _assert_previous_snapshot_intact(committed)
    os.unlink(store.preempt_path)
    del committed.namespace["aa_ask"]  # it would ask again
    assert snapshot_save.save(store)["committed"] is True
    assert committed.manifest()["bindings"]["zz_later"]


def test_the_preempt_file_stops_a_background_revive_between_bindings(session):
    from pi_repl_kernel.snapshot import reviving as snapshot_restore

    namespace = new_namespace("\n".join(f"big{i} = list(range(600_000))" for i in range(3)))
    snapshot_save.save(session.open(namespace))
    store = session.store(new_namespace(""))
    eager = snapshot_restore.restore(store, phase="eager")
    assert len(eager["pending"]) == 3
    open(store.preempt_path, "w").close()
    stopped = snapshot_restore.restore(store, phase="rest")
    assert stopped["revived"] == [] and len(stopped["pending"]) == 3
    os.unlink(store.preempt_path)
    finished = snapshot_restore.restore(store, phase="rest")
    assert sorted(finished["revived"]) == ["big0", "big1", "big2"] and finished["pending"] == []
