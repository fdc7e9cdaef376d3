"""The facade's contract: JSON-serialisable dicts, never an exception (but KeyboardInterrupt),
and no save over an existing snapshot before it was restored."""

import json
import os
import stat
import sys

import pytest

from pi_repl_kernel import snapshot
from pi_repl_kernel.snapshot import saving as snapshot_save
from pi_repl_kernel.snapshot import store as snapshot_store


def test_a_whole_session_through_the_api(api):
    assert api.configure(protected_names=["read"]) == {"ok": True}
    assert snapshot.restore(phase="eager")["status"] == "none"
    api.namespace.update(x=1, read=lambda path: path)
    saved = snapshot.save(hint_names=["x"])
    assert saved["committed"] and saved["bindings"] == 1
    json.dumps(saved)
    assert snapshot.pending() == {"pending": []}
    status = snapshot.status()
    json.dumps(status)
    assert status["configured"] and status["bindings"] == 1 and status["last_save"] == saved

    api.namespace.clear()
    assert api.configure() == {"ok": True}  # a new kernel
    revived = snapshot.restore(phase="all")
    json.dumps(revived)
    assert revived["status"] == "ok" and api.namespace["x"] == 1
    assert set(revived) >= {"status", "reason", "saved_at", "revived", "pending", "failed",
                            "poisoned", "unsaved"}


def test_the_state_dir_is_created_private(api):
    os.rmdir(api.session.state_dir)
    assert api.configure() == {"ok": True}
    assert stat.S_IMODE(os.stat(api.session.state_dir).st_mode) == 0o700


def test_configure_reports_a_missing_or_bad_key(api):
    os.unlink(api.session.key_file)
    assert api.configure()["ok"] is False
    with open(api.session.key_file, "w") as file:
        file.write("not hex")
    result = api.configure()
    assert result["ok"] is False and "does not hold hex text" in result["error"]


def test_configure_without_a_namespace_outside_ipython_is_an_error(session):
    result = snapshot.configure(session.state_dir, session.key_file, max_binding_bytes=1,
                                max_total_bytes=1)
    assert result == {"ok": False, "error": "not running under IPython: pass namespace="}


def test_calls_before_configure_answer_with_an_error(api):
    snapshot._store = None
    assert snapshot.save()["committed"] is False
    assert snapshot.restore()["status"] == "error"
    assert snapshot.pending() == {"pending": []}
    assert snapshot.status() == {"configured": False}


def test_save_refuses_to_replace_a_snapshot_that_was_not_restored(api):
    api.configure()
    snapshot.restore()
    api.namespace["precious"] = "data"
    assert snapshot.save()["committed"]
    api.namespace.clear()
    api.configure()  # a new kernel that forgot to restore
    refused = snapshot.save()
    assert refused["committed"] is False and "restore() has not been called" in refused["error"]
    assert "precious" in api.session.manifest()["bindings"]


def test_an_unknown_phase_is_an_error_not_an_exception(api):
    api.configure()
    assert snapshot.restore(phase="later")["status"] == "error"


def test_an_internal_error_is_returned_not_raised(api, monkeypatch):
    api.configure()
    snapshot.restore()

    def broken(*args, **kwargs):
        raise OSError("disk on fire")

    monkeypatch.setattr(snapshot_save, "save", broken)
    assert snapshot.save() == {"committed": False, "error": "OSError: disk on fire"}


def test_keyboard_interrupt_passes_through_the_api(api, monkeypatch):
    api.configure()
    snapshot.restore()

    def preempted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(snapshot_save, "save", preempted)
    with pytest.raises(KeyboardInterrupt):
        snapshot.save()


def test_a_rebound_value_without_weak_references_is_let_go_before_the_next_save(api):
    """A value whose type takes no weak reference (a bytearray, a list) is held strongly by the
    store so its identity cannot be reused; once its name is rebound the store lets it go at
    the next capture or save, not after it commits (a rebuilt 8 GB buffer was held twice)."""
    assert api.configure() == {"ok": True}
    assert snapshot.restore(phase="eager")["status"] == "none"
    api.namespace.update(data=bytearray(b"old" * 1000), kept=[1, 2, 3])
    assert snapshot.save(hint_names=["data", "kept"])["committed"]
    old = api.namespace["data"]
    api.namespace["data"] = bytearray(b"new" * 1000)
    held = sys.getrefcount(old)  # this test's name, the call's argument, and the store
    snapshot_store.let_go_of_rebound(snapshot._store)
    assert sys.getrefcount(old) == held - 1, "the store no longer holds the rebound value"
    tracked = snapshot._store.tracked
    assert tracked["kept"].holds(api.namespace["kept"]), "an unchanged binding is still known"
    assert not tracked["data"].holds(old) and not tracked["data"].holds(None)
    saved = snapshot.save(hint_names=["data"])
    assert saved["committed"] and saved["bindings"] == 2

    api.namespace.clear()
    assert api.configure() == {"ok": True}  # a new kernel
    assert snapshot.restore(phase="all")["status"] == "ok"
    assert api.namespace["data"] == bytearray(b"new" * 1000)
    assert api.namespace["kept"] == [1, 2, 3]
