"""What the store verifies, and what it never touches: the user's memory is never read to check a
blob, a blob's id always matches the bytes written under it, and a revive keeps what the saved
objects shared (closure cells).
"""

import os

import numpy as np

from conftest import new_namespace, run
from pi_repl_kernel.snapshot import blobs as snapshot_blobs
from pi_repl_kernel.snapshot import reviving as snapshot_restore
from pi_repl_kernel.snapshot import saving as snapshot_save


def _array_beside_a_pending_list(session):
    namespace = new_namespace("""
        import numpy as np
        arr = np.arange(1_000_000.0)  # 8 MB out-of-band: revived in the eager phase
        big_list = list(range(400_000))  # a stream over 1 MiB: pending until the rest phase
    """)
    snapshot_save.save(session.open(namespace))
    return namespace


def _blob_path(session, blob):
    return os.path.join(session.state_dir, "blobs", blob["id"][:2], snapshot_blobs.filename(blob))


def test_a_revived_array_changed_in_place_survives_the_background_revive(session):
    original = _array_beside_a_pending_list(session)
    namespace, eager, store = session.revive(phase="eager")
    assert "arr" in eager["revived"] and eager["pending"] == ["big_list"]
    run(namespace, "arr *= 2")
    rest = snapshot_restore.restore(store, phase="rest")
    assert rest["failed"] == {} and rest["revived"] == ["big_list"]
    assert np.array_equal(namespace["arr"], original["arr"] * 2)
    snapshot_save.save(store, hint_names=["arr"])
    again, result, _ = session.revive()
    assert result["failed"] == {} and np.array_equal(again["arr"], original["arr"] * 2)


def test_a_flipped_byte_in_a_raw_blob_is_caught_before_the_binding_is_handed_over(session):
    _array_beside_a_pending_list(session)
    blob = session.manifest()["bindings"]["arr"]["buffers"][0]
    path = _blob_path(session, blob)
    with open(path, "r+b") as file:
        file.seek(4000)
        byte = file.read(1)
        file.seek(4000)
        file.write(bytes([byte[0] ^ 1]))  # same size, one bit wrong
    namespace, eager, store = session.revive(phase="eager")
    assert "does not match its checksum" in eager["failed"]["arr"]
    assert "arr" not in namespace
    snapshot_save.save(store)  # never re-signed: the stored entry is carried over as it was
    assert session.manifest()["bindings"]["arr"]["buffers"][0]["id"] == blob["id"]


def test_the_blob_id_matches_the_bytes_written_when_an_array_changes_after_it_was_hashed(
        session, monkeypatch):
    namespace = new_namespace("import numpy as np\narr = np.zeros(1_000_000)")
    store = session.open(namespace)
    write_blobs = snapshot_save._Plan.write_blobs

    def mutate_then_write(plan):
        namespace["arr"][:] = 7.0  # another thread writing between the hash and the write
        return write_blobs(plan)

    monkeypatch.setattr(snapshot_save._Plan, "write_blobs", mutate_then_write)
    assert snapshot_save.save(store)["committed"]
    blob = session.manifest()["bindings"]["arr"]["buffers"][0]
    with open(_blob_path(session, blob), "rb") as file:
        assert snapshot_blobs.content_id(file.read()) == blob["id"]
    revived, result, _ = session.revive()
    assert result["failed"] == {}
    assert (revived["arr"] == 7.0).all()


CLOSURES = """
    def make():
        n = 0
        def inc():
            nonlocal n
            n += 1
        def get():
            return n
        return inc, get
    inc, get = make()
    inc(); inc()
"""


def test_closures_that_share_a_variable_still_share_it_after_a_revive(session):
    store = session.open(new_namespace(CLOSURES))
    snapshot_save.save(store)
    namespace, result, store = session.revive()
    assert result["failed"] == {}
    assert namespace["get"]() == 2
    namespace["inc"]()
    assert namespace["get"]() == 3
    assert namespace["inc"].__closure__[0] is namespace["get"].__closure__[0]
    summary = snapshot_save.save(store)
    assert summary["written"] == ["get"]  # the cell's owner holds its value; inc is unchanged
    again, _, _ = session.revive()
    assert again["get"]() == 3
    again["inc"]()
    assert again["get"]() == 4


def test_closures_in_one_binding_still_share_their_variable_after_a_revive(session):
    namespace = new_namespace(CLOSURES.replace("inc, get = make()\n    inc(); inc()",
                                               "pair = make()\n    pair[0](); pair[0]()"))
    snapshot_save.save(session.open(namespace))
    revived, result, _ = session.revive()
    inc, get = revived["pair"]
    assert result["failed"] == {} and get() == 2
    inc()
    assert get() == 3
