"""Only what changed is written; caps skip and name; unreferenced blobs are collected."""

import json
import os
import time

import numpy as np

from conftest import new_namespace, run, run_child
from pi_repl_kernel.snapshot import saving as snapshot_save


def test_a_no_op_save_pickles_nothing_immutable_and_writes_nothing(session):
    namespace = new_namespace("""
        import numpy as np
        label = "text"
        pair = (1, "two", (3.0, None))
        items = [1, 2, 3]
        grid = np.zeros((512, 512))
        def func():
            return label
    """)
    store = session.open(namespace)
    first = snapshot_save.save(store)
    files, mtime = session.blob_files(), os.stat(session.manifest_path).st_mtime_ns
    second = snapshot_save.save(store)
    assert first["written"] == ["func", "grid", "items", "label", "np", "pair"]
    assert second["written"] == [] and second["written_bytes"] == 0
    assert second["manifest_written"] is False
    assert session.blob_files() == files
    assert os.stat(session.manifest_path).st_mtime_ns == mtime
    assert second["unchanged"] == 6


def test_one_small_change_next_to_a_large_buffer_writes_one_small_blob(session):
    namespace = new_namespace()
    namespace["buffer"] = np.ones(4 << 20)  # 32 MiB
    namespace["counter"] = 1
    store = session.open(namespace)
    snapshot_save.save(store)
    before = set(session.blob_files())
    namespace["counter"] = 2
    summary = snapshot_save.save(store)
    new_files = set(session.blob_files()) - before
    assert summary["written"] == ["counter"]
    assert len(new_files) == 1 and summary["written_bytes"] < 100
    revived, _, _ = session.revive()
    assert revived["counter"] == 2 and revived["buffer"].shape == (4 << 20,)


def test_in_place_mutations_are_detected(session):
    namespace = new_namespace("""
        import numpy as np
        items = [1, 2]
        table = {"a": 1}
        array = np.zeros(100_000)
    """)
    store = session.open(namespace)
    snapshot_save.save(store)
    run(namespace, "items.append(3); table['b'] = 2; array[5] = 7.0")
    summary = snapshot_save.save(store)
    assert summary["written"] == ["array", "items", "table"]
    revived, _, _ = session.revive()
    assert revived["items"] == [1, 2, 3] and revived["table"] == {"a": 1, "b": 2}
    assert revived["array"][5] == 7.0


def test_an_equal_new_object_writes_no_blob(session):
    namespace = new_namespace("items = [1, 2, 3]")
    store = session.open(namespace)
    snapshot_save.save(store)
    run(namespace, "items = [1, 2, 3]")
    summary = snapshot_save.save(store)
    assert summary["written"] == [] and summary["written_bytes"] == 0


class SlowToPickle:
    """Takes 150 ms to reduce, so its fingerprint pass counts as expensive."""

    def __init__(self):
        self.data = [0]

    def __reduce__(self):
        time.sleep(0.15)
        return (_rebuild_slow, (list(self.data),))


def _rebuild_slow(data):
    slow = SlowToPickle()
    slow.data = data
    return slow


def test_an_expensive_binding_is_rechecked_only_when_hinted_rebound_or_full(session):
    namespace = new_namespace()
    namespace["slow"] = SlowToPickle()
    store = session.open(namespace)
    snapshot_save.save(store)

    namespace["slow"].data.append(1)  # changed in place, by code that does not name it
    skipped = snapshot_save.save(store)
    assert skipped["not_rechecked"] == ["slow"] and skipped["written"] == []

    hinted = snapshot_save.save(store, hint_names=["slow"])
    assert hinted["written"] == ["slow"]

    namespace["slow"].data.append(2)
    full = snapshot_save.save(store, full=True)
    assert full["written"] == ["slow"]

    namespace["slow"] = SlowToPickle()  # rebound: identity changed
    rebound = snapshot_save.save(store)
    assert rebound["written"] == ["slow"]
    revived, _, _ = session.revive()
    assert revived["slow"].data == [0]


def test_a_binding_whose_stream_is_over_the_per_binding_cap_is_skipped_and_named(session):
    namespace = new_namespace()
    namespace["large"] = np.random.default_rng(0).bytes(2_400_000)  # 2.3 MiB in-band, incompressible
    namespace["array"] = np.ones(300_000)  # 2.3 MiB out-of-band: chunked, never capped per binding
    namespace["small"] = 1
    store = session.open(namespace, max_binding_bytes=1 << 20)
    summary = snapshot_save.save(store)
    assert summary["skipped"] == {"large": "2.3 MiB, over the 1 MiB per-binding cap"}
    assert "large" not in session.manifest()["bindings"]
    revived, result, _ = session.revive()
    assert result["unsaved"] == {"large": "2.3 MiB, over the 1 MiB per-binding cap"}
    assert np.array_equal(revived["array"], namespace["array"])


def test_over_the_total_cap_the_largest_changed_bindings_are_dropped_first(session):
    namespace = new_namespace()
    namespace["old"] = np.ones(200_000)  # 1.5 MiB, saved first
    store = session.open(namespace, max_total_bytes=4 << 20)
    snapshot_save.save(store)
    namespace["big_new"] = np.ones(300_000)  # 2.3 MiB
    namespace["mid_new"] = np.ones(150_000)  # 1.1 MiB
    summary = snapshot_save.save(store)
    assert list(summary["skipped"]) == ["big_new"]
    assert "dropped to keep the snapshot under the 4 MiB total cap" in summary["skipped"]["big_new"]
    assert sorted(session.manifest()["bindings"]) == ["mid_new", "old"]
    assert session.manifest()["stored_bytes"] <= 4 << 20


def test_an_alias_of_a_skipped_binding_is_named_too(session):
    namespace = new_namespace("import threading\nlock = threading.Lock()\nsame = lock")
    store = session.open(namespace)
    summary = snapshot_save.save(store)
    assert summary["skipped"]["same"].startswith("alias of lock, which was not saved")


def test_unreferenced_blobs_are_collected_after_each_commit(session):
    namespace = new_namespace()
    namespace["data"] = np.ones(100_000)
    store = session.open(namespace)
    snapshot_save.save(store)
    first_files = set(session.blob_files())
    namespace["data"] = np.zeros(100_000)
    snapshot_save.save(store)
    second_files = set(session.blob_files())
    assert not first_files & second_files - {_stream_file(session, "data")}
    assert second_files == _referenced_files(session)
    del namespace["data"]
    snapshot_save.save(store)
    assert set(session.blob_files()) == _referenced_files(session) == set()


def test_leftovers_of_a_dead_writer_are_swept_by_the_first_save(session):
    namespace = new_namespace("value = 1")
    store = session.open(namespace)
    snapshot_save.save(store)
    blob_dir = os.path.join(session.state_dir, "blobs", "ab")
    os.makedirs(blob_dir, exist_ok=True)
    stray, old_temp, young_temp = (os.path.join(blob_dir, name) for name in (
        "ab" + "0" * 30, ".tmp-old", ".tmp-young"))
    # Issue 11: a killed manifest write left its temp file in the state directory for good.
    old_manifest_temp = os.path.join(session.state_dir, ".manifest.json.tmp-123-abcd")
    for path in (stray, old_temp, young_temp, old_manifest_temp):
        with open(path, "wb") as file:
            file.write(b"x")
    for path in (old_temp, old_manifest_temp):
        os.utime(path, (time.time() - 120, time.time() - 120))
    later = session.open(new_namespace("value = 1"))  # a new kernel: its first save sweeps
    summary = snapshot_save.save(later)
    assert summary["swept"] == 3
    assert not os.path.exists(stray) and not os.path.exists(old_temp)
    assert not os.path.exists(old_manifest_temp)
    assert os.path.exists(young_temp)  # may belong to a writer still at work
    assert os.path.exists(os.path.join(session.state_dir, "manifest.json"))


def _referenced_files(session):
    names = set()
    for entry in session.manifest()["bindings"].values():
        if entry["kind"] == "alias":
            continue
        names.add(entry["stream"]["id"] + ".zst")
        for buffer in entry["buffers"]:
            names.update(blob["id"] for blob in buffer.get("chunks", [buffer]))
    return names


def _stream_file(session, name):
    return session.manifest()["bindings"][name]["stream"]["id"] + ".zst"


CHILD_REVIVE_THEN_SAVE = """
    import builtins, json, sys
    from pi_repl_kernel import snapshot
    namespace = {"__name__": "__main__", "__builtins__": builtins}
    snapshot.configure(sys.argv[1], sys.argv[2], max_binding_bytes=1 << 32,
                       max_total_bytes=1 << 34, namespace=namespace)
    revived = snapshot.restore(phase="all")
    first, second = snapshot.save(), snapshot.save()
    print(json.dumps({"revived": revived, "first": first, "second": second}))
"""


def test_a_revive_in_a_new_process_rewrites_only_values_whose_pickle_is_not_stable(session):
    """The first save after a revive re-checks everything and writes almost nothing.

    A dataclass pickles differently in a new process, once: cloudpickle copies a ``dataclasses``
    helper by value, and string identity there differs after loading. (A set of strings may too:
    its order follows the per-process string hash.) The arrays, functions, classes, enums and
    instances are not rewritten, and the save after that writes nothing.
    """
    namespace = new_namespace("""
        import dataclasses, enum
        import numpy as np
        limit = 10
        def clamp(value, low=0):
            return max(low, min(limit, value))
        class Shape:
            sides = 0
            def describe(self):
                return f"{type(self).__name__} with {self.sides} sides"
        class Square(Shape):
            sides = 4
        @dataclasses.dataclass
        class Point:
            x: int
            y: int = 0
        class Colour(enum.Enum):
            RED = 1
        shapes = [Square(), Shape()]
        origin = Point(0)
        grid = np.arange(100_000.0)
        words = ["alpha", "beta"]
    """)
    snapshot_save.save(session.open(namespace))
    child = run_child(CHILD_REVIVE_THEN_SAVE, session.state_dir, session.key_file)
    assert child.returncode == 0, child.stderr
    result = json.loads(child.stdout)
    assert result["revived"]["failed"] == {}
    assert result["first"]["written"] == ["Point"]
    assert result["first"]["written_bytes"] < 4096
    assert result["second"]["written"] == [] and result["second"]["manifest_written"] is False
