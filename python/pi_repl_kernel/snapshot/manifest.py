"""The signed manifest: the one small file that says what a snapshot holds.

Owns: the format name and version, the JSON schema of a manifest (documented field by field in
``docs/snapshot-format.md``), its HMAC-SHA256 signature, the atomic write, and the checks a
manifest must pass before anything it names may be unpickled. Does not own: building the entries
(``snapshot_save``) or acting on them (``snapshot_restore``).

Invariants:

- The manifest is replaced atomically (temp file, fsync, rename, fsync the directory) and only
  after every blob it names is durable; a reader sees the old manifest or the new one, whole.
- Read order: parse (corrupt or truncated -> ``Refused``), format name and version (unknown ->
  ``Refused``, saying which), signature (not this installation's key -> ``Refused``), schema.
  Only a manifest that passed all four is returned. A refusal's ``kind`` says whether the
  snapshot may be readable as it is elsewhere (another key, a newer pi-repl) or is damaged.
- The signature is HMAC-SHA256, keyed with this installation's key, over the *canonical JSON* of
  the manifest without its ``signature`` field: keys sorted, separators ``,`` and ``:``, no
  whitespace, UTF-8, non-ASCII characters written as themselves. Manifests hold no floats, so a
  reader in another language can reproduce the bytes.
"""

import hashlib
import hmac
import json
import os

from . import blobs as snapshot_blobs

FORMAT = "pi-repl-snapshot"
VERSION = 3
"""The format version this code writes. Version 2 added chunked buffers (``buffer_blobs``),
version 3 large lists and dicts in chunks of items (an entry's ``items``)."""
READABLE_VERSIONS = (1, 2, 3)
"""Every format version this code reads (older ones it wrote stay readable)."""

MANIFEST_NAME = "manifest.json"
SIGNATURE_FIELD = "signature"
KINDS = ("value", "function", "class", "module", "alias")


DAMAGED = "damaged"
"""A refusal no key or version can lift: corrupt, truncated, malformed, another format."""
FOREIGN = "foreign"
"""Not signed with this key: another installation's key (or an altered manifest)."""
NEWER = "newer"
"""Written by a newer pi-repl, which can read it."""


class Refused(Exception):
    """The manifest must not be used. ``str(error)`` is a sentence a user can act on; ``kind``
    says whether the snapshot may become readable as it is (``FOREIGN``, ``NEWER``: with the
    key that signed it, or a newer pi-repl) or never (``DAMAGED``)."""

    def __init__(self, message, kind=DAMAGED):
        super().__init__(message)
        self.kind = kind


def canonical_bytes(body):
    """The bytes the signature covers: canonical JSON of ``body`` (without ``signature``)."""
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode("utf-8")


def sign(body, key):
    return hmac.new(key, canonical_bytes(body), hashlib.sha256).hexdigest()


def encode(body, key):
    """The bytes of the manifest file for ``body``: signed, pretty-printed, keys sorted."""
    manifest = dict(body)
    manifest[SIGNATURE_FIELD] = sign(body, key)
    return json.dumps(manifest, sort_keys=True, indent=1, ensure_ascii=False).encode("utf-8")


def write(state_dir, body, key):
    """Sign ``body`` and make it the manifest of ``state_dir``, atomically and durably."""
    data = encode(body, key)
    write_atomically(os.path.join(state_dir, MANIFEST_NAME), data)
    mark_committed(state_dir)


COMMITTED_MARKER = "committed"
"""An empty file in the state directory once a manifest was committed (or read) there: blobs
without a manifest then mean the manifest was lost, not that a first save never committed."""


def mark_committed(state_dir):
    """Note that ``state_dir`` has had a manifest (idempotent)."""
    marker = os.path.join(state_dir, COMMITTED_MARKER)
    if not os.path.exists(marker):
        write_atomically(marker, b"")


def ever_committed(state_dir):
    """True when a manifest was committed (or read) in ``state_dir``."""
    return os.path.exists(os.path.join(state_dir, COMMITTED_MARKER))


def write_atomically(path, data):
    """Replace ``path`` with ``data``: temp file in the same directory, fsync, rename, fsync dir.

    The temp file is removed if anything (even KeyboardInterrupt) stops the write before the
    rename.
    """
    directory = os.path.dirname(path)
    snapshot_blobs.write_then_rename(
        data, path, f".{os.path.basename(path)}{snapshot_blobs.TEMP_PREFIX}")
    snapshot_blobs.fsync_dir(directory)


def read(state_dir, key):
    """Return the verified manifest body (without ``signature``), or None if there is none.

    Raise ``Refused`` if it is corrupt, truncated, of an unknown format or version, or not signed
    with ``key``.
    """
    return read_file(os.path.join(state_dir, MANIFEST_NAME), key)


def read_file(path, key):
    """``read`` of the manifest at ``path`` (a kept state's, ``snapshot_states``)."""
    try:
        with open(path, "rb") as file:
            data = file.read()
    except FileNotFoundError:
        return None
    manifest = _parse(data)
    _check_format(manifest)
    body = _check_signature(manifest, key)
    _check_schema(body)
    return body


def _parse(data):
    try:
        manifest = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as error:
        raise Refused(
            f"the snapshot manifest is truncated or corrupt ({_first_line(error)}); nothing was "
            "revived"
        ) from None
    if not isinstance(manifest, dict):
        raise Refused("the snapshot manifest is corrupt (not a JSON object); nothing was revived")
    return manifest


def _check_format(manifest):
    if manifest.get("format") != FORMAT:
        raise Refused(f"the snapshot manifest is not a {FORMAT} manifest (format "
                      f"{manifest.get('format')!r}); nothing was revived")
    version = manifest.get("version")
    if type(version) is not int:
        raise Refused(f"the snapshot manifest has no valid format version ({version!r}); "
                      "nothing was revived")
    if version > max(READABLE_VERSIONS):
        raise Refused(f"the snapshot was written by a newer pi-repl (format {version}; this one "
                      f"reads up to {max(READABLE_VERSIONS)}); nothing was revived. Upgrade "
                      "pi-repl to revive it", kind=NEWER)
    if version not in READABLE_VERSIONS:
        raise Refused(f"the snapshot has format {version}, which this pi-repl cannot read (it "
                      f"reads {', '.join(map(str, READABLE_VERSIONS))}); nothing was revived")


def _check_signature(manifest, key):
    signature = manifest.get(SIGNATURE_FIELD)
    body = {name: value for name, value in manifest.items() if name != SIGNATURE_FIELD}
    try:
        expected = sign(body, key)
    except ValueError:  # a float NaN or similar cannot be canonical: not one we wrote
        expected = None
    if not isinstance(signature, str) or expected is None or not hmac.compare_digest(
            signature, expected):
        raise Refused("the snapshot is not signed by this installation's key (it was written by "
                      "another installation or with another key, or altered); nothing was "
                      "revived", kind=FOREIGN)
    return body


def _check_schema(body):
    """Reject a signed manifest whose shape this code does not understand."""
    problem = _schema_problem(body)
    if problem:
        raise Refused(f"the snapshot manifest is malformed ({problem}); nothing was revived")


def _schema_problem(body):
    if not isinstance(body.get("saved_at"), str):
        return "no saved_at"
    bindings, unsaved = body.get("bindings"), body.get("unsaved")
    if not isinstance(bindings, dict) or not isinstance(unsaved, dict):
        return "bindings or unsaved is not an object"
    version = body.get("version", VERSION)
    for name, entry in bindings.items():
        problem = _entry_problem(entry, bindings, version)
        if problem:
            return f"binding {name!r}: {problem}"
    return None


def _entry_problem(entry, bindings, version):
    if not isinstance(entry, dict) or entry.get("kind") not in KINDS:
        return "unknown kind"
    if entry["kind"] == "alias":
        target = bindings.get(entry.get("alias"))
        return None if isinstance(target, dict) and target.get("kind") != "alias" else "bad alias"
    if not _is_blob(entry.get("stream"), snapshot_blobs.ENCODING_ZSTD):
        return "bad stream blob"
    buffers = entry.get("buffers")
    if not isinstance(buffers, list) or not all(_is_buffer(blob, version >= 2)
                                                for blob in buffers):
        return "bad buffer blobs"
    if "items" in entry and (version < 3 or buffers or not _is_items(entry["items"])):
        return "bad item chunks"
    refs = entry.get("refs")
    if not isinstance(refs, list) or not all(isinstance(ref, str) for ref in refs):
        return "bad refs"
    return None


def _is_blob(blob, encoding):
    return (isinstance(blob, dict) and blob.get("encoding") == encoding
            and isinstance(blob.get("id"), str) and len(blob["id"]) == 32
            and all(c in "0123456789abcdef" for c in blob["id"])
            and type(blob.get("size")) is int and type(blob.get("stored")) is int)


def _is_buffer(buffer, chunked):
    """A raw blob, or (version 2) a ``chunks`` object: raw chunk blobs whose sizes add up."""
    if _is_blob(buffer, snapshot_blobs.ENCODING_RAW):
        return True
    if not chunked or not isinstance(buffer, dict) or \
            buffer.get("encoding") != snapshot_blobs.ENCODING_CHUNKS:
        return False
    chunks = buffer.get("chunks")
    return (isinstance(chunks, list) and len(chunks) > 0
            and all(_is_blob(chunk, snapshot_blobs.ENCODING_RAW) for chunk in chunks)
            and type(buffer.get("size")) is int and type(buffer.get("stored")) is int
            and sum(chunk["size"] for chunk in chunks) == buffer["size"])


def _is_items(items):
    """(Version 3) a value in chunks of items: its container, item count, and zstd chunks."""
    if not isinstance(items, dict) or items.get("container") not in ("list", "dict"):
        return False
    chunks = items.get("chunks")
    return (type(items.get("count")) is int and type(items.get("stored")) is int
            and isinstance(chunks, list) and len(chunks) > 0
            and all(_is_blob(chunk, snapshot_blobs.ENCODING_ZSTD) for chunk in chunks))


def buffer_blobs(buffer):
    """The raw blobs a manifest buffer object is stored in: itself, or its chunks."""
    if buffer.get("encoding") == snapshot_blobs.ENCODING_CHUNKS:
        return buffer["chunks"]
    return [buffer]


def entry_blobs(entry):
    """Every blob (stream, raw buffers and their chunks, item chunks) a non-alias binding entry
    refers to."""
    blobs = [entry["stream"]]
    for buffer in entry["buffers"]:
        blobs.extend(buffer_blobs(buffer))
    if "items" in entry:
        blobs.extend(entry["items"]["chunks"])
    return blobs


def blob_files(body):
    """The file names of every blob a manifest body refers to."""
    names = set()
    for entry in body["bindings"].values():
        if entry["kind"] != "alias":
            names.update(snapshot_blobs.filename(blob) for blob in entry_blobs(entry))
    return names


def _first_line(error):
    return str(error).splitlines()[0] if str(error) else type(error).__name__
