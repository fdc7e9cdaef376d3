"""Large buffers in chunks (format version 2, issue 21 item 6): a buffer over one chunk is stored
as content-addressed chunk blobs, revived into one contiguous mapping, verified chunk by chunk;
a change to a few elements writes only the chunks that hold them; sweep keeps exactly the chunks
a manifest names; no per-binding cap applies to a chunked buffer; version 1 manifests still read.

Chunks are made small here (``CHUNK``, a multiple of the page size) so the tests move kilobytes.
"""

import json
import os

import numpy as np
import pytest

from conftest import new_namespace
from pi_repl_kernel.snapshot import blobs as snapshot_blobs
from pi_repl_kernel.snapshot import fork as snapshot_fork
from pi_repl_kernel.snapshot import manifest as snapshot_manifest
from pi_repl_kernel.snapshot import saving as snapshot_save

CHUNK = 64 * 1024


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch):
    monkeypatch.setattr(snapshot_blobs, "CHUNK_BYTES", CHUNK)


def _array():
    return np.arange(40_000, dtype=np.float64)  # 320,000 bytes: 4 full chunks and a partial one


def _saved(session, value=None):
    namespace = new_namespace()
    namespace["arr"] = _array() if value is None else value
    namespace["small"] = {"a": 1}
    store = session.open(namespace)
    assert snapshot_save.save(store)["committed"]
    return namespace, store


def _buffer(session, name="arr"):
    return session.manifest()["bindings"][name]["buffers"][0]


def _chunk_path(session, chunk):
    return os.path.join(session.state_dir, "blobs", chunk["id"][:2], chunk["id"])


def test_a_buffer_over_one_chunk_is_stored_in_chunks_and_revived_whole(session):
    namespace, _ = _saved(session)
    buffer = _buffer(session)
    assert buffer["encoding"] == "chunks" and buffer["size"] == 320_000
    assert [chunk["size"] for chunk in buffer["chunks"]] == [CHUNK] * 4 + [320_000 - 4 * CHUNK]
    data = namespace["arr"].tobytes()
    for index, chunk in enumerate(buffer["chunks"]):
        with open(_chunk_path(session, chunk), "rb") as file:
            assert file.read() == data[index * CHUNK:(index + 1) * CHUNK]
    assert np.array_equal(namespace["arr"], _array())  # a save in the kernel releases nothing
    revived, result, _ = session.revive()
    assert result["failed"] == {} and np.array_equal(revived["arr"], namespace["arr"])
    assert revived["arr"].flags.writeable


def test_a_revived_chunked_array_changed_in_place_leaves_its_chunks_alone(session):
    namespace, _ = _saved(session)
    revived, _, _ = session.revive()
    revived["arr"][:] = -1.0  # copy-on-write: the mapped chunk files are never written
    again, result, _ = session.revive()
    assert result["failed"] == {} and np.array_equal(again["arr"], namespace["arr"])


def test_without_fixed_mappings_the_chunks_are_read_into_one_buffer(session, monkeypatch):
    namespace, _ = _saved(session)
    monkeypatch.setattr(snapshot_blobs, "_fixed_map", None)
    revived, result, _ = session.revive()
    assert result["failed"] == {} and np.array_equal(revived["arr"], namespace["arr"])


def test_one_changed_element_writes_one_chunk_and_the_replaced_chunk_is_swept(session):
    namespace, store = _saved(session)
    before = _buffer(session)["chunks"]
    namespace["arr"][20_000] = -5.0  # byte 160,000: inside chunk 2
    summary = snapshot_save.save(store, hint_names=["arr"])
    assert summary["written"] == ["arr"] and summary["written_bytes"] == CHUNK
    after = _buffer(session)["chunks"]
    assert [a["id"] == b["id"] for a, b in zip(before, after)] == [True, True, False, True, True]
    assert not os.path.exists(_chunk_path(session, before[2]))  # no longer referenced
    assert set(session.blob_files()) == snapshot_manifest.blob_files(session.manifest())
    revived, result, _ = session.revive()
    assert result["failed"] == {} and revived["arr"][20_000] == -5.0


def test_equal_chunks_are_stored_once(session):
    _saved(session, np.zeros(40_000))
    chunks = _buffer(session)["chunks"]
    assert len({chunk["id"] for chunk in chunks}) == 2  # four equal full chunks, one partial
    assert session.manifest()["bindings"]["arr"]["stored_bytes"] < 2 * CHUNK + 1000


def test_a_flipped_byte_in_one_chunk_fails_that_binding_only(session):
    _saved(session)
    chunk = _buffer(session)["chunks"][3]
    with open(_chunk_path(session, chunk), "r+b") as file:
        file.seek(100)
        byte = file.read(1)
        file.seek(100)
        file.write(bytes([byte[0] ^ 1]))
    revived, result, _ = session.revive()
    assert "does not match its checksum" in result["failed"]["arr"]
    assert "arr" not in revived and revived["small"] == {"a": 1}


def test_a_missing_chunk_fails_that_binding_only(session):
    _saved(session)
    os.unlink(_chunk_path(session, _buffer(session)["chunks"][0]))
    revived, result, _ = session.revive()
    assert "is missing" in result["failed"]["arr"] and revived["small"] == {"a": 1}


def test_a_chunked_buffer_has_no_per_binding_cap(session):
    namespace = new_namespace()
    namespace["arr"] = _array()
    store = session.open(namespace, max_binding_bytes=CHUNK)
    summary = snapshot_save.save(store)
    assert summary["skipped"] == {} and summary["written"] == ["arr"]
    revived, _, _ = session.revive()
    assert np.array_equal(revived["arr"], namespace["arr"])


def test_a_version_1_manifest_is_still_revived_and_the_next_save_writes_the_current_version(
        session, monkeypatch):
    namespace = new_namespace()
    namespace["raw"] = np.arange(10_000.0)  # 80,000 bytes: one raw blob, as version 1 wrote it
    store = session.open(namespace)
    monkeypatch.setattr(snapshot_blobs, "CHUNK_BYTES", 1 << 20)
    snapshot_save.save(store)
    monkeypatch.setattr(snapshot_blobs, "CHUNK_BYTES", CHUNK)
    body = session.manifest()
    del body["signature"]
    body["version"] = 1
    assert body["bindings"]["raw"]["buffers"][0]["encoding"] == "raw"
    snapshot_manifest.write(session.state_dir, body, session.key)
    revived, result, store = session.revive()
    assert result["status"] == "ok" and result["failed"] == {}
    assert np.array_equal(revived["raw"], namespace["raw"])
    revived["more"] = _array()
    snapshot_save.save(store)
    assert session.manifest()["version"] == snapshot_manifest.VERSION
    assert _buffer(session, "more")["encoding"] == "chunks"


def test_a_version_1_manifest_with_chunks_is_refused_as_malformed(session):
    _saved(session)
    body = session.manifest()
    del body["signature"]
    body["version"] = 1
    snapshot_manifest.write(session.state_dir, body, session.key)
    _, result, _ = session.revive()
    assert result["status"] == "refused" and "malformed" in result["reason"]


def test_chunk_sizes_that_do_not_add_up_are_refused_as_malformed(session):
    _saved(session)
    body = session.manifest()
    del body["signature"]
    body["bindings"]["arr"]["buffers"][0]["size"] += 1
    snapshot_manifest.write(session.state_dir, body, session.key)
    _, result, _ = session.revive()
    assert result["status"] == "refused" and "bad buffer blobs" in result["reason"]


def test_a_background_save_writes_chunks_and_leaves_the_kernels_array_intact(session):
    namespace = new_namespace()
    namespace["arr"] = np.random.default_rng(0).random(100_000)  # 800 KB: 13 chunks
    expected = namespace["arr"].copy()
    store = session.open(namespace)
    started = snapshot_fork.start(store)
    assert started["started"], started
    os.waitid(os.P_PID, started["pid"], os.WEXITED | os.WNOWAIT)
    finished = snapshot_fork.status(store)["finished"]
    assert finished["committed"] and finished["written"] == ["arr"], finished
    assert np.array_equal(namespace["arr"], expected)  # the child released only its own pages
    revived, result, _ = session.revive()
    assert result["failed"] == {} and np.array_equal(revived["arr"], expected)


def test_released_pages_are_dropped_in_the_releasing_process_only():
    data = np.full(1 << 18, 7.0)  # 2 MiB
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: release, then report what it reads
        os.close(read)
        snapshot_blobs.release_pages(memoryview(data).cast("B"))
        inner = data[4096:-4096]  # whole pages only: the edges may stay
        os.write(write, json.dumps(bool((inner == 0.0).all())).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        child_saw_zeros = json.loads(pipe.read())
    os.waitpid(pid, 0)
    assert child_saw_zeros is True
    assert (data == 7.0).all()


def test_a_save_child_releasing_pages_as_it_writes_still_saves_overlapping_views(session):
    namespace = new_namespace()
    base = np.random.default_rng(1).random(100_000)
    namespace["whole"] = base  # 800 KB
    namespace["half"] = base[50_000:]  # a view into the same memory, written after or before it
    namespace["other"] = np.random.default_rng(2).random(50_000)
    expected = {name: namespace[name].copy() for name in ("whole", "half", "other")}
    store = session.open(namespace)
    started = snapshot_fork.start(store)
    os.waitid(os.P_PID, started["pid"], os.WEXITED | os.WNOWAIT)
    finished = snapshot_fork.status(store)["finished"]
    assert finished["committed"] and finished["written"] == ["half", "other", "whole"], finished
    revived, result, _ = session.revive()
    assert result["failed"] == {}
    for name, value in expected.items():
        assert np.array_equal(revived[name], value), name


def test_only_views_that_overlap_no_other_are_released_as_they_are_written():
    base = np.zeros(100_000)
    apart = np.zeros(100_000)
    views = [memoryview(base), memoryview(base[50_000:]), memoryview(apart)]
    assert snapshot_save._alone(views) == {id(views[2])}
