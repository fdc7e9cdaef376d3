"""A manifest that is corrupt, truncated, foreign or from the future is refused before anything
is unpickled; a corrupt blob fails only its binding, before it is unpickled."""

import json
import os
import secrets

import pytest

from conftest import new_namespace
from pi_repl_kernel.snapshot import manifest as snapshot_manifest
from pi_repl_kernel.snapshot import saving as snapshot_save


class LeavesAMarker:
    """Unpickling this creates the file at ``path``: proof that something was unpickled."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


@pytest.fixture
def saved(session, tmp_path):
    """A session whose snapshot holds a marker binding and a plain one."""
    marker = str(tmp_path / "unpickled")
    namespace = new_namespace("plain = [1, 2, 3]")
    namespace["marker"] = LeavesAMarker(marker)
    snapshot_save.save(session.open(namespace))
    session.marker = marker
    return session


def test_the_marker_does_fire_when_the_snapshot_is_sound(saved):
    revived, result, _ = saved.revive()
    assert result["status"] == "ok" and os.path.exists(saved.marker)
    revived["marker"].close()


def test_a_truncated_manifest_is_refused_and_nothing_is_unpickled(saved):
    with open(saved.manifest_path, "rb") as file:
        data = file.read()
    with open(saved.manifest_path, "wb") as file:
        file.write(data[: len(data) // 2])
    revived, result, _ = saved.revive()
    assert result["status"] == "refused"
    assert result["reason"].startswith("the snapshot manifest is truncated or corrupt")
    assert result["revived"] == [] and "plain" not in revived
    assert not os.path.exists(saved.marker)


def test_a_corrupt_manifest_is_refused_and_nothing_is_unpickled(saved):
    with open(saved.manifest_path, "wb") as file:
        file.write(b"\x00\xff not json")
    _, result, _ = saved.revive()
    assert result["status"] == "refused" and "truncated or corrupt" in result["reason"]
    assert not os.path.exists(saved.marker)


def test_a_manifest_signed_with_another_key_is_refused_and_nothing_is_unpickled(saved):
    _, result, _ = saved.revive(key=secrets.token_bytes(32))
    assert result["status"] == "refused"
    assert result["reason"].startswith("the snapshot is not signed by this installation's key")
    assert not os.path.exists(saved.marker)


def test_an_altered_manifest_is_refused(saved):
    manifest = saved.manifest()
    manifest["bindings"]["plain"]["type"] = "builtins.tuple"
    with open(saved.manifest_path, "w") as file:
        json.dump(manifest, file)
    _, result, _ = saved.revive()
    assert result["status"] == "refused" and "not signed" in result["reason"]
    assert not os.path.exists(saved.marker)


def test_a_manifest_from_a_newer_format_is_refused_with_an_actionable_reason(saved):
    body = saved.manifest()
    del body["signature"]
    body["version"] = 4
    snapshot_manifest.write(saved.state_dir, body, saved.key)  # properly signed, still refused
    _, result, _ = saved.revive()
    assert result["status"] == "refused"
    assert "written by a newer pi-repl (format 4; this one reads up to 3)" in result["reason"]
    assert not os.path.exists(saved.marker)


def test_a_manifest_of_another_format_is_refused(saved):
    body = saved.manifest()
    body["format"] = "something-else"
    with open(saved.manifest_path, "w") as file:
        json.dump(body, file)
    _, result, _ = saved.revive()
    assert result["status"] == "refused" and "not a pi-repl-snapshot manifest" in result["reason"]


def test_no_manifest_means_no_snapshot(session):
    revived, result, _ = session.revive()
    assert result["status"] == "none" and result["revived"] == []


def test_a_corrupt_blob_fails_its_binding_before_unpickling_it(saved):
    stream = saved.manifest()["bindings"]["marker"]["stream"]
    path = os.path.join(saved.state_dir, "blobs", stream["id"][:2], stream["id"] + ".zst")
    os.chmod(path, 0o600)
    with open(path, "r+b") as file:
        file.seek(-1, os.SEEK_END)
        last = file.read(1)
        file.seek(-1, os.SEEK_END)
        file.write(bytes([last[0] ^ 0xFF]))
    revived, result, _ = saved.revive()
    assert result["status"] == "ok"
    assert result["failed"]["marker"].startswith("corrupt blob: blob ")
    assert revived["plain"] == [1, 2, 3]
    assert not os.path.exists(saved.marker)


def test_a_missing_blob_fails_its_binding(saved):
    stream = saved.manifest()["bindings"]["plain"]["stream"]
    os.unlink(os.path.join(saved.state_dir, "blobs", stream["id"][:2], stream["id"] + ".zst"))
    revived, result, _ = saved.revive()
    assert result["failed"] == {"plain": f"corrupt blob: blob {stream['id']}.zst is missing"}
    revived["marker"].close()


def test_the_signature_covers_canonical_json_a_reader_can_reproduce(saved):
    manifest = saved.manifest()
    signature = manifest.pop("signature")
    canonical = json.dumps(manifest, sort_keys=True, separators=(",", ":"),
                           ensure_ascii=False).encode()
    import hashlib
    import hmac
    assert hmac.new(saved.key, canonical, hashlib.sha256).hexdigest() == signature
    assert manifest["format"] == "pi-repl-snapshot" and manifest["version"] == 3


def _siblings(saved):
    parent = os.path.dirname(saved.state_dir)
    return sorted(name for name in os.listdir(parent) if ".refused-" in name)


def test_a_snapshot_signed_with_another_key_is_kept_in_place_and_never_saved_over(saved):
    """Issue 21: a wrong key set the snapshot aside and signed a new one with itself; putting the
    right key back then revived nothing."""
    with open(saved.manifest_path, "rb") as file:
        before = file.read()
    namespace, result, store = saved.revive(key=secrets.token_bytes(32))
    assert result["status"] == "refused" and result["kept_in_place"] is True
    assert result["refused_kind"] == "foreign"
    assert "kept where it is, unchanged, and nothing is saved over it" in result["reason"]
    namespace["new"] = "made with the wrong key"
    refused = snapshot_save.save(store)
    assert refused["committed"] is False and "nothing is saved over it" in refused["error"]
    with open(saved.manifest_path, "rb") as file:
        assert file.read() == before, "the manifest was re-signed"
    assert _siblings(saved) == [], "nothing was set aside"
    revived, result, _ = saved.revive()
    assert result["status"] == "ok" and revived["plain"] == [1, 2, 3]
    revived["marker"].close()


def test_a_snapshot_from_a_newer_pi_repl_is_kept_in_place(saved):
    """Issue 21: a newer pi-repl's snapshot stays for the newer pi-repl to revive."""
    body = saved.manifest()
    del body["signature"]
    body["version"] = 4
    snapshot_manifest.write(saved.state_dir, body, saved.key)
    _, result, store = saved.revive()
    assert result["kept_in_place"] is True and result["refused_kind"] == "newer"
    assert snapshot_save.save(store)["committed"] is False
    assert saved.manifest()["version"] == 4 and _siblings(saved) == []


def test_a_damaged_manifest_is_set_aside_and_a_new_snapshot_starts(saved):
    with open(saved.manifest_path, "wb") as file:
        file.write(b"{ not json")
    namespace, result, store = saved.revive()
    assert result["status"] == "refused" and result["kept_in_place"] is False
    assert result["refused_kind"] == "damaged"
    assert len(_siblings(saved)) == 1
    namespace["fresh"] = 1
    assert snapshot_save.save(store)["committed"] is True
