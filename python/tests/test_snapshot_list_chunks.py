"""Large lists and dicts of plain data in chunks of items (format version 3, issue 21 item 6: a
300 MB list changed in one item was re-pickled whole, about 1 s a save). A chunk whose items are
the very objects of the last save is not pickled again, a changed one is pickled alone and only
new chunks are written; anything that is not plain data is pickled whole, as before; revive
rebuilds the same value; sweep keeps exactly the chunks the manifest names.

Chunks are made small here (``CHUNK`` items, chunking from ``MIN`` items) so the tests move
kilobytes.
"""

import json
import os

import pytest

from conftest import new_namespace
from pi_repl_kernel.snapshot import blobs as snapshot_blobs
from pi_repl_kernel.snapshot import fork as snapshot_fork
from pi_repl_kernel.snapshot import items as snapshot_items
from pi_repl_kernel.snapshot import manifest as snapshot_manifest
from pi_repl_kernel.snapshot import reviving as snapshot_restore
from pi_repl_kernel.snapshot import saving as snapshot_save

CHUNK = 100
MIN = 200


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch):
    monkeypatch.setattr(snapshot_items, "CHUNK_ITEMS", CHUNK)
    monkeypatch.setattr(snapshot_items, "MIN_ITEMS", MIN)


@pytest.fixture
def pickled_chunks(monkeypatch):
    """Every item chunk pickled by a save (its items), in order."""
    seen = []
    real = snapshot_items.pickle_chunk

    def counting(items):
        seen.append(items)
        return real(items)

    monkeypatch.setattr(snapshot_items, "pickle_chunk", counting)
    return seen


def _rows(count=1_050):
    return [(i, str(i)) for i in range(count)]  # 10 full chunks and a partial one


def _saved(session, value):
    namespace = new_namespace()
    namespace["data"] = value
    namespace["small"] = {"a": 1}
    store = session.open(namespace)
    summary = snapshot_save.save(store)
    assert summary["committed"] and "data" in summary["written"], summary
    return namespace, store


def _items(session, name="data"):
    return session.manifest()["bindings"][name].get("items")


def _chunk_files(session):
    return {blob["id"] + ".zst" for blob in _items(session)["chunks"]}


def test_a_big_list_is_stored_in_chunks_and_revived_equal(session):
    namespace, _ = _saved(session, _rows())
    items = _items(session)
    assert items["container"] == "list" and items["count"] == 1_050
    assert len(items["chunks"]) == 11
    assert session.manifest()["version"] == 3
    assert session.manifest()["bindings"]["data"]["buffers"] == []
    revived, result, _ = session.revive()
    assert result["failed"] == {} and revived["data"] == namespace["data"]
    assert type(revived["data"]) is list


def test_a_big_dict_is_stored_in_chunks_in_insertion_order(session):
    value = {f"k{i}": (i, i / 2, None) for i in range(1_000, 0, -1)}
    namespace, _ = _saved(session, value)
    assert _items(session)["container"] == "dict"
    revived, result, _ = session.revive()
    assert result["failed"] == {} and revived["data"] == value
    assert list(revived["data"]) == list(value)


def test_one_changed_item_pickles_and_writes_one_chunk(session, pickled_chunks):
    namespace, store = _saved(session, _rows())
    before = _items(session)["chunks"]
    pickled_chunks.clear()
    namespace["data"][555] = (555, "changed")
    summary = snapshot_save.save(store, hint_names=["data"])
    assert summary["written"] == ["data"]
    assert len(pickled_chunks) == 1, "only the changed chunk is pickled"
    after = _items(session)["chunks"]
    assert [a["id"] == b["id"] for a, b in zip(before, after)] == \
        [True] * 5 + [False] + [True] * 5
    chunk = after[5]
    head = session.manifest()["bindings"]["data"]["stream"]
    assert summary["written_bytes"] == chunk["stored"] + head["stored"]
    assert set(session.blob_files()) == snapshot_manifest.blob_files(session.manifest())
    assert before[5]["id"] + ".zst" not in session.blob_files()  # swept
    revived, result, _ = session.revive()
    assert result["failed"] == {} and revived["data"][555] == (555, "changed")
    assert revived["data"] == namespace["data"]


def test_an_unchanged_list_is_not_pickled_again(session, pickled_chunks):
    _, store = _saved(session, _rows())
    pickled_chunks.clear()
    summary = snapshot_save.save(store, hint_names=["data"], full=True)
    assert summary["written"] == [] and summary["written_bytes"] == 0
    assert pickled_chunks == []


def test_an_item_equal_but_not_the_same_object_is_pickled_and_writes_nothing(session):
    namespace, store = _saved(session, _rows())
    namespace["data"][7] = (7, "".join(["7"]))  # a new, equal tuple
    summary = snapshot_save.save(store, hint_names=["data"])
    assert summary["written"] == [] and summary["written_bytes"] == 0


def test_an_item_equal_in_value_but_of_another_type_is_saved(session):
    """1 == 1.0 == True: identity, not equality, decides that a chunk is unchanged."""
    namespace, store = _saved(session, list(range(1_000)))
    namespace["data"][1] = True
    namespace["data"][2] = 2.0
    summary = snapshot_save.save(store, hint_names=["data"])
    assert summary["written"] == ["data"]
    revived, _, _ = session.revive()
    assert revived["data"][1] is True and type(revived["data"][2]) is float


def test_a_list_holding_a_mutable_item_is_pickled_whole_and_in_place_changes_are_saved(
        session):
    rows = _rows()
    rows[900] = ["inner"]
    namespace, store = _saved(session, rows)
    assert _items(session) is None, "a mutable item keeps the list in one stream"
    namespace["data"][900].append("more")
    summary = snapshot_save.save(store, hint_names=["data"])
    assert summary["written"] == ["data"]
    revived, _, _ = session.revive()
    assert revived["data"][900] == ["inner", "more"]


def test_a_chunked_list_that_gains_a_mutable_item_is_saved_whole(session):
    namespace, store = _saved(session, _rows())
    namespace["data"][3] = {"mutable": [1]}
    snapshot_save.save(store, hint_names=["data"])
    assert _items(session) is None
    namespace["data"][3]["mutable"].append(2)
    assert snapshot_save.save(store, hint_names=["data"])["written"] == ["data"]
    revived, _, _ = session.revive()
    assert revived["data"][3] == {"mutable": [1, 2]}


def test_nested_tuples_of_atoms_are_plain_data_and_a_list_in_a_tuple_is_not():
    assert snapshot_items.all_atoms([(1, ("a", (b"x", None, frozenset({2.5})))), 3j, True])
    assert not snapshot_items.all_atoms([(1, ("a", [2]))])
    assert not snapshot_items.all_atoms([object()])
    assert not snapshot_items.all_atoms([bytearray(b"x")])


def test_a_changed_dict_value_or_a_new_key_is_saved(session):
    value = {i: str(i) for i in range(1_000)}
    namespace, store = _saved(session, value)
    namespace["data"][10] = "ten"
    namespace["data"]["new"] = None
    assert snapshot_save.save(store, hint_names=["data"])["written"] == ["data"]
    revived, _, _ = session.revive()
    assert revived["data"] == namespace["data"] and list(revived["data"])[-1] == "new"


def test_an_alias_of_a_chunked_list_is_the_same_object_after_revive(session):
    namespace = new_namespace()
    namespace["a"] = _rows()
    namespace["b"] = namespace["a"]
    store = session.open(namespace)
    snapshot_save.save(store)
    bindings = session.manifest()["bindings"]
    assert bindings["b"] == {"kind": "alias", "alias": "a", "type": "builtins.list"}
    assert "items" in bindings["a"]
    revived, result, _ = session.revive()
    assert result["failed"] == {} and revived["b"] is revived["a"]
    assert revived["a"] == namespace["a"]


def test_two_equal_lists_share_their_chunk_blobs(session):
    namespace = new_namespace()
    namespace["a"] = _rows()
    namespace["c"] = list(namespace["a"])
    store = session.open(namespace)
    summary = snapshot_save.save(store)
    assert sorted(summary["written"]) == ["a", "c"]
    manifest = session.manifest()
    assert [blob["id"] for blob in manifest["bindings"]["a"]["items"]["chunks"]] == \
        [blob["id"] for blob in manifest["bindings"]["c"]["items"]["chunks"]]


def test_a_small_list_is_pickled_whole(session):
    namespace = new_namespace()
    namespace["few"] = list(range(MIN - 1))
    store = session.open(namespace)
    snapshot_save.save(store)
    assert "items" not in session.manifest()["bindings"]["few"]


def test_a_corrupt_chunk_fails_that_binding_only(session):
    _saved(session, _rows())
    chunk = _items(session)["chunks"][4]
    path = os.path.join(session.state_dir, "blobs", chunk["id"][:2], chunk["id"] + ".zst")
    with open(path, "r+b") as file:
        data = file.read()
        file.seek(0)
        file.write(snapshot_blobs.compress(b"not the pickled chunk" + data[:10]))
        file.truncate()
    revived, result, _ = session.revive()
    assert result["failed"]["data"].startswith("corrupt blob: blob ")
    assert "data" not in revived and revived["small"] == {"a": 1}


def test_a_missing_chunk_fails_that_binding_only(session):
    _saved(session, _rows())
    chunk = _items(session)["chunks"][0]
    os.unlink(os.path.join(session.state_dir, "blobs", chunk["id"][:2], chunk["id"] + ".zst"))
    revived, result, _ = session.revive()
    assert "is missing" in result["failed"]["data"] and revived["small"] == {"a": 1}


def test_a_revived_list_changed_in_one_item_pickles_one_chunk(session, pickled_chunks):
    _saved(session, _rows())
    revived, _, store = session.revive()
    pickled_chunks.clear()
    assert snapshot_save.save(store, hint_names=["data"])["written"] == []
    assert pickled_chunks == [], "the revived items are known"
    revived["data"][1_000] = (0, "x")
    assert snapshot_save.save(store, hint_names=["data"])["written"] == ["data"]
    assert len(pickled_chunks) == 1


def test_a_chunked_list_is_pending_after_an_eager_revive_when_its_chunks_are_large(
        session, monkeypatch):
    _saved(session, _rows())
    monkeypatch.setattr(snapshot_restore, "EAGER_STREAM_BYTES", 1_000)
    revived, result, store = session.revive(phase="eager")
    assert result["pending"] == ["data"] and revived["small"] == {"a": 1}
    result = snapshot_restore.restore(store, phase="rest")
    assert result["revived"] == ["data"] and revived["data"] == _rows()


def test_a_version_2_manifest_with_item_chunks_is_refused_as_malformed(session):
    _saved(session, _rows())
    body = session.manifest()
    del body["signature"]
    body["version"] = 2
    snapshot_manifest.write(session.state_dir, body, session.key)
    _, result, _ = session.revive()
    assert result["status"] == "refused" and "bad item chunks" in result["reason"]


def test_a_version_2_manifest_is_revived_and_the_next_save_writes_version_3(session):
    namespace = new_namespace()
    namespace["few"] = [1, 2, 3]
    store = session.open(namespace)
    snapshot_save.save(store)
    body = session.manifest()
    del body["signature"]
    body["version"] = 2
    snapshot_manifest.write(session.state_dir, body, session.key)
    revived, result, store = session.revive()
    assert result["status"] == "ok" and revived["few"] == [1, 2, 3]
    revived["data"] = _rows()
    snapshot_save.save(store)
    assert session.manifest()["version"] == 3 and _items(session)["count"] == 1_050


def _wait_for_child(store):
    while True:
        status = snapshot_fork.status(store)
        if not status["running"]:
            return status["finished"]
        os.waitid(os.P_PID, store.child.pid, os.WEXITED | os.WNOWAIT)


def test_a_save_child_confirms_chunks_and_the_kernel_pickles_only_changed_ones(
        session, pickled_chunks):
    """The child's objects never reach the kernel: the kernel keeps its records of the chunks
    the child found unchanged and takes the changed ones from the live value as candidates."""
    namespace, store = _saved(session, _rows())
    namespace["data"][150] = (150, "one")
    assert snapshot_fork.start(store, hint_names=["data"])["started"]
    namespace["data"][950] = (950, "after the fork")  # the child's image does not hold it
    finished = _wait_for_child(store)
    assert finished["committed"] and finished["written"] == ["data"], finished
    known = store.tracked["data"].known_chunks
    assert [k.blob is None for k in known] == [False] + [True] + [False] * 9
    revived, _, _ = session.revive()
    assert revived["data"][150] == (150, "one") and revived["data"][950] == (950, "950")
    pickled_chunks.clear()
    summary = snapshot_save.save(store, hint_names=["data"])
    assert summary["written"] == ["data"]
    assert len(pickled_chunks) == 2, "the candidate (confirmed now) and the chunk changed since"
    pickled_chunks.clear()
    assert snapshot_save.save(store, hint_names=["data"])["written"] == []
    assert pickled_chunks == []
    revived, _, _ = session.revive()
    assert revived["data"] == namespace["data"]


def test_a_kernel_candidate_changed_after_the_fork_is_never_trusted(session):
    """The chunk the child pickled changes again before the kernel adopts the commit: the
    candidate the kernel takes holds the new item, which the committed blob does not."""
    namespace, store = _saved(session, _rows())
    namespace["data"][150] = (150, "one")
    assert snapshot_fork.start(store, hint_names=["data"])["started"]
    namespace["data"][151] = (151, "after the fork")  # same chunk, not in the child's image
    assert _wait_for_child(store)["committed"]
    assert store.tracked["data"].known_chunks[1].blob is None
    summary = snapshot_save.save(store, hint_names=["data"])
    assert summary["written"] == ["data"]
    revived, _, _ = session.revive()
    assert revived["data"][151] == (151, "after the fork")


def test_the_child_report_says_which_chunks_were_confirmed(session):
    namespace, store = _saved(session, _rows())
    namespace["data"][0] = (0, "zero")
    assert snapshot_fork.start(store, hint_names=["data"])["started"]
    assert _wait_for_child(store)["committed"]
    body = json.loads(json.dumps(session.manifest()))
    assert "items" in body["bindings"]["data"]
    assert [k.blob is None for k in store.tracked["data"].known_chunks] == [True] + [False] * 10


def test_a_name_rebound_from_a_chunked_list_to_a_chunked_dict_is_saved(session):
    namespace, store = _saved(session, list(range(1_000)))
    namespace["data"] = {i: i for i in range(1_000)}
    assert snapshot_save.save(store)["written"] == ["data"]
    namespace["data"] = list(range(1_000))
    assert snapshot_save.save(store)["written"] == ["data"]
    revived, result, _ = session.revive()
    assert result["failed"] == {} and revived["data"] == list(range(1_000))


@pytest.mark.parametrize("frozen", [False, True])
def test_a_chunk_holds_the_known_items_only_when_every_item_is_the_same_object(frozen):
    """A save child compares item pointers (no reference count written, so no page copied);
    the kernel compares with ``is``. Both answer alike."""
    if frozen:
        assert snapshot_items._items_address is not None, "CPython's list layout was not found"
    value = _rows(350)
    known = value[100:200]
    source = snapshot_items._Source(value, snapshot_items.LIST, frozen)
    assert source.frozen is frozen
    assert source.holds(100, known)
    assert not source.holds(0, known) and not source.holds(200, known)
    value[150] = (150, "150")  # equal, another object
    assert not source.holds(100, known)
    value[150] = known[50]
    assert source.holds(100, known)
    assert not source.holds(300, value[300:350][:-1])  # a shorter known chunk
