"""Lazy revive: ``eager`` loads what is cheap, ``rest`` the remainder; pending bindings are never
lost by a save, never overwrite a name bound since, and every blob is verified before use."""

import os

import numpy as np

from conftest import new_namespace
from pi_repl_kernel.snapshot import reviving as snapshot_restore
from pi_repl_kernel.snapshot import saving as snapshot_save


def _big_and_small(session):
    namespace = new_namespace("""
        import numpy as np
        small = {"a": 1}
        big_list = list(range(400_000))  # a pickle stream over 1 MiB
        array = np.arange(1_000_000.0)  # 8 MB, but its stream is tiny: mapped eagerly
    """)
    snapshot_save.save(session.open(namespace))
    return namespace


def test_eager_loads_small_streams_and_mapped_arrays_and_rest_loads_the_remainder(session):
    original = _big_and_small(session)
    entry = session.manifest()["bindings"]["big_list"]  # stored in chunks of items (version 3)
    assert sum(blob["size"] for blob in entry["items"]["chunks"]) > 1 << 20
    namespace, eager, store = session.revive(phase="eager")
    assert sorted(eager["revived"]) == ["array", "np", "small"]
    assert eager["pending"] == ["big_list"] and "big_list" not in namespace
    assert snapshot_restore.pending(store) == ["big_list"]
    rest = snapshot_restore.restore(store, phase="rest")
    assert rest["revived"] == ["big_list"] and rest["pending"] == []
    assert namespace["big_list"] == original["big_list"]
    assert np.array_equal(namespace["array"], original["array"])


def test_a_save_between_phases_keeps_the_pending_bindings(session):
    _big_and_small(session)
    namespace, _, store = session.revive(phase="eager")
    namespace["small"]["b"] = 2
    summary = snapshot_save.save(store)
    assert summary["held"] == ["big_list"] and "big_list" in session.manifest()["bindings"]
    assert summary["written"] == ["small"]
    rest = snapshot_restore.restore(store, phase="rest")
    assert rest["revived"] == ["big_list"] and len(namespace["big_list"]) == 400_000


def test_a_pending_name_bound_by_the_user_is_not_overwritten(session):
    _big_and_small(session)
    namespace, _, store = session.revive(phase="eager")
    namespace["big_list"] = "the user's new value"
    rest = snapshot_restore.restore(store, phase="rest")
    assert rest["superseded"] == ["big_list"] and rest["revived"] == []
    assert namespace["big_list"] == "the user's new value"
    snapshot_save.save(store)
    assert session.manifest()["bindings"]["big_list"]["type"] == "builtins.str"


def test_a_second_restore_never_replaces_live_bindings(session):
    namespace = new_namespace("value = 1")
    store = session.open(namespace)
    snapshot_save.save(store)
    namespace["value"] = 2
    again = snapshot_restore.restore(store, phase="all")
    assert again["revived"] == [] and namespace["value"] == 2
    other = new_namespace("value = 'bound by the tool first'")
    first = session.store(other)
    result = snapshot_restore.restore(first, phase="all")
    assert result["superseded"] == ["value"] and other["value"] == "bound by the tool first"


def test_skipped_names_are_not_revived_and_stay_in_the_snapshot(session):
    _big_and_small(session)
    namespace, result, store = session.revive(phase="all", skip=["small"])
    assert result["skipped"] == ["small"] and "small" not in namespace
    snapshot_save.save(store)
    assert "small" in session.manifest()["bindings"]
    assert session.revive()[0]["small"] == {"a": 1}


def test_large_values_wait_for_the_rest_phase_so_a_resume_does_not_grow_with_them(session,
                                                                                 monkeypatch):
    namespace = new_namespace("""
        import numpy as np
        small = np.arange(100_000)  # 800 kB out-of-band: within the eager budget
        big_array = np.arange(1_000_000)  # 8 MB out-of-band: over the budget set below
        big_bytearray = bytearray(8_000_000)  # out-of-band too (a top-level bytearray)
        big_bytes = bytes(3_000_000)  # in-band: its stream is over 1 MiB
    """)
    snapshot_save.save(session.open(namespace))
    monkeypatch.setattr(snapshot_restore, "EAGER_BUFFER_BYTES", 4_000_000)
    revived, eager, store = session.revive(phase="eager")
    assert sorted(eager["revived"]) == ["np", "small"]
    assert eager["pending"] == ["big_array", "big_bytearray", "big_bytes"]
    rest = snapshot_restore.restore(store, phase="rest")
    assert rest["failed"] == {} and rest["pending"] == []
    assert revived["big_bytearray"] == namespace["big_bytearray"]
    assert np.array_equal(revived["big_array"], namespace["big_array"])


def test_all_verifies_buffers_before_unpickling(session):
    _big_and_small(session)
    blob = session.manifest()["bindings"]["array"]["buffers"][0]
    path = os.path.join(session.state_dir, "blobs", blob["id"][:2], blob["id"])
    with open(path, "r+b") as file:
        file.write(b"\x01")
    namespace, result, _ = session.revive(phase="all")
    assert "does not match its checksum" in result["failed"]["array"]
    assert "array" not in namespace and namespace["small"] == {"a": 1}


def test_an_eager_binding_brings_what_it_refers_to(session):
    namespace = new_namespace("""
        class Table:
            rows = list(range(400_000))  # makes the class stream large
        table = Table()
    """)
    snapshot_save.save(session.open(namespace))
    revived, eager, _ = session.revive(phase="eager")
    assert sorted(eager["revived"]) == ["Table", "table"]
    assert type(revived["table"]) is revived["Table"]


def test_an_alias_of_a_pending_binding_waits_for_it(session):
    namespace = new_namespace("big = list(range(400_000))\nzalias = big")
    snapshot_save.save(session.open(namespace))
    revived, eager, store = session.revive(phase="eager")
    assert eager["pending"] == ["big", "zalias"]
    snapshot_restore.restore(store, phase="rest")
    assert revived["zalias"] is revived["big"]


def test_an_alias_of_an_eager_array_is_eager_and_costs_no_more_of_the_budget(session,
                                                                            monkeypatch):
    namespace = new_namespace("""
        import numpy as np
        a = np.arange(400_000)  # 3.2 MB
        b = a
        c = np.arange(100_000)  # 800 kB
    """)
    snapshot_save.save(session.open(namespace))
    monkeypatch.setattr(snapshot_restore, "EAGER_BUFFER_BYTES", 4_100_000)
    revived, eager, _ = session.revive(phase="eager")
    assert sorted(eager["revived"]) == ["a", "b", "c", "np"] and revived["b"] is revived["a"]
