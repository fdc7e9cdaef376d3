"""The content-addressed blob directory of one snapshot store.

Owns: blob ids, the file layout under ``<state_dir>/blobs``, durable writes, verified reads,
memory-mapping raw buffers, and deleting blobs. Does not own: which blobs are referenced (the
manifest) or when they are collected (``snapshot_save``).

Invariants:

- A blob id is the xxh3_128 hex digest of the blob's *uncompressed* content, as written: a raw
  buffer (a view of live memory that another thread may change at any time) is copied a chunk
  at a time, and each chunk is hashed and written from that one copy; the file is named by that
  hash (``write_raw``), so a file's name always matches its bytes.
- Layout: ``blobs/<first 2 hex of id>/<id>`` for raw blobs (out-of-band buffers, stored as is so
  they can be memory-mapped) and ``blobs/<2 hex>/<id>.zst`` for zstd-compressed pickle streams.
- A buffer larger than ``CHUNK_BYTES`` is stored as chunks of ``CHUNK_BYTES`` (the last one
  shorter), each a raw blob of its own: a buffer changed in a few places writes only the chunks
  that changed, and no single file has to hold a whole large value. ``map_chunks`` maps them back
  into one contiguous copy-on-write region.
- A blob file under its final name is always complete and durable: it is written to a temp file
  (``.tmp-...``) in the same directory, fsynced, then renamed. Blobs are never modified in place,
  so a memory map of one stays valid even after the file is collected. Identical content is
  written once.
- Files are 0600, directories 0700.
"""

import ctypes
import mmap
import os
import secrets
import sys
import time

import xxhash
import zstandard

ZSTD_LEVEL = 1
"""zstd level for pickle streams. Levels 1-3 measured within noise of each other in speed
(3.1-4.8 ms on 3-5 MB mixed pickle streams, level 3 sometimes the faster), level 3 1-2% smaller;
zlib-6 took 170-350 ms on the same streams (python/bench/snapshot_bench.py prints this)."""

ENCODING_RAW = "raw"
ENCODING_ZSTD = "zstd"
TEMP_PREFIX = ".tmp-"
RAW_CHUNK_BYTES = 8 << 20
"""A raw buffer is copied, hashed and written this many bytes at a time (see ``write_raw``)."""
CHUNK_BYTES = 16 << 20
"""Buffers larger than this are stored in chunks of this size (a multiple of every page size, so
each chunk maps at its offset). A change to one element rewrites one chunk."""
ENCODING_CHUNKS = "chunks"
"""A manifest buffer object made of raw chunk blobs (format version 2)."""
TEMP_MAX_AGE_SECONDS = 60
"""A temp file older than this belongs to a writer that died; it is collected."""


class CorruptBlob(Exception):
    """A blob is missing, truncated or does not hash to its id. The message says which."""


def content_id(data):
    """The blob id of ``data`` (bytes-like): xxh3_128, hex."""
    return xxhash.xxh3_128_hexdigest(data)


def filename(blob):
    """File name of a blob description (a manifest blob dict: id, encoding)."""
    suffix = ".zst" if blob["encoding"] == ENCODING_ZSTD else ""
    return blob["id"] + suffix


def compress(stream):
    return zstandard.ZstdCompressor(level=ZSTD_LEVEL).compress(stream)


class BlobStore:
    """The ``blobs`` directory: writes, reads and deletes blob files."""

    def __init__(self, root):
        self.root = root
        self._unsynced_dirs = set()
        self._unpublished = {}
        """Raw blob id -> its written temp file, until ``publish``."""

    def path(self, name):
        return os.path.join(self.root, name[:2], name)

    def exists(self, name):
        return os.path.exists(self.path(name))

    def write(self, name, data):
        """Write ``data`` as blob file ``name`` unless it exists; return the bytes written.

        The temp file is removed if anything (even KeyboardInterrupt) stops the write. Call
        ``sync_dirs`` before publishing a manifest that refers to the new file.
        """
        final = self.path(name)
        if os.path.exists(final):
            return 0
        directory = os.path.dirname(final)
        self._make_dir(directory)
        write_then_rename(data, final, f"{TEMP_PREFIX}{name}-")
        self._unsynced_dirs.add(directory)
        return memoryview(data).nbytes

    def write_raw(self, blob, view, frozen=False):
        """Write the raw buffer ``view`` for ``blob`` (a manifest blob dict); return bytes written.

        ``blob["id"]`` is the hash taken when the buffer was fingerprinted; if a file with that
        id exists (or is already waiting in this save), nothing is written. Otherwise, unless
        ``frozen``, each piece is copied out of ``view`` once, then hashed and written from the
        copy, and the file is named by that hash: if the memory changed since the fingerprint,
        ``blob["id"]`` is updated to what was written. ``frozen`` says the memory cannot change
        (a save child's copy-on-write image, which has one thread): the view is written as is,
        under the fingerprint's id, with no copy and no second hash.

        The file is written but not yet durable nor under its final name: ``publish`` fsyncs and
        renames every file written since the last call, so a save can release the memory it
        wrote from before it waits for the disk.
        """
        if self._known(filename(blob)):
            return 0
        view = memoryview(view).cast("B")
        temp_dir = os.path.dirname(self.path(blob["id"]))
        self._make_dir(temp_dir)
        temp = _temp_path(temp_dir, f"{TEMP_PREFIX}{blob['id']}-")
        try:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                if frozen:
                    _write_all(fd, view)
                    blob_id = blob["id"]
                else:
                    blob_id = _copy_hash_write(fd, view)
            finally:
                os.close(fd)
            if self._known(blob_id):
                _remove_quietly(temp)  # the same bytes are stored already
            else:
                self._unpublished[blob_id] = temp
        except BaseException:
            _remove_quietly(temp)
            raise
        blob["id"] = blob_id
        return view.nbytes

    def publish(self):
        """Make every raw file written since the last call durable under its final name (fsync,
        rename), then fsync every directory a new blob was renamed into."""
        try:
            for blob_id, temp in list(self._unpublished.items()):
                fd = os.open(temp, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
                final = self.path(blob_id)
                self._make_dir(os.path.dirname(final))
                os.rename(temp, final)
                del self._unpublished[blob_id]
                self._unsynced_dirs.add(os.path.dirname(final))
        except BaseException:
            self.discard_unpublished()
            raise
        self.sync_dirs()

    def discard_unpublished(self):
        """Remove the temp files of raw blobs written but not published (a stopped save)."""
        for temp in self._unpublished.values():
            _remove_quietly(temp)
        self._unpublished.clear()

    def _known(self, name):
        return name in self._unpublished or os.path.exists(self.path(name))

    def sync_dirs(self):
        """fsync every directory a new blob was renamed into since the last call."""
        for directory in sorted(self._unsynced_dirs):
            fsync_dir(directory)
        self._unsynced_dirs.clear()

    def read_stream(self, blob):
        """Read, decompress and verify a stream blob; raise ``CorruptBlob`` if it is not intact."""
        name = filename(blob)
        try:
            with open(self.path(name), "rb") as file:
                stored = file.read()
        except FileNotFoundError:
            raise CorruptBlob(f"blob {name} is missing") from None
        if blob["encoding"] == ENCODING_ZSTD:
            try:
                data = zstandard.ZstdDecompressor().decompress(stored, max_output_size=blob["size"])
            except zstandard.ZstdError as error:
                raise CorruptBlob(f"blob {name} cannot be decompressed ({error})") from None
        else:
            data = stored
        _check(name, data, blob)
        return data

    def map_buffer(self, blob):
        """Map a raw buffer blob copy-on-write (writable, paged in on demand) and verify it.

        Its size and content hash are checked through the new mapping before it is returned,
        while no one else holds it: the check never reads memory a user may have changed since.
        Raise ``CorruptBlob`` if it is not intact.
        """
        name = filename(blob)
        try:
            fd = os.open(self.path(name), os.O_RDONLY)
        except FileNotFoundError:
            raise CorruptBlob(f"blob {name} is missing") from None
        try:
            size = os.fstat(fd).st_size
            if size != blob["size"]:
                raise CorruptBlob(f"blob {name} has {size} bytes, expected {blob['size']}")
            mapping = mmap.mmap(fd, size, access=mmap.ACCESS_COPY)
        finally:
            os.close(fd)
        try:
            _check(name, mapping, blob)
        except CorruptBlob:
            mapping.close()
            raise
        return mapping

    def map_chunks(self, buffer):
        """Map a chunked buffer (a manifest ``chunks`` object) as one contiguous copy-on-write
        region and verify every chunk through it; raise ``CorruptBlob`` if one is not intact.

        On Linux an anonymous region of the buffer's size is reserved and each chunk file is
        mapped over its part (``MAP_FIXED``), so nothing is read until used and closing the
        region unmaps every chunk. Elsewhere, or when a chunk's offset is not page-aligned, the
        chunks are read into one ``bytearray``.
        """
        chunks = buffer["chunks"]
        offsets, offset = [], 0
        for chunk in chunks:
            offsets.append(offset)
            offset += chunk["size"]
        if offset != buffer["size"]:
            raise CorruptBlob(f"chunked buffer has {offset} bytes in its chunks, expected "
                              f"{buffer['size']}")
        if _fixed_map is None or any(start % mmap.PAGESIZE for start in offsets) or not offset:
            return self._read_chunks(chunks, offset)
        region = mmap.mmap(-1, offset, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        try:
            address = _address_of(region)
            for chunk, start in zip(chunks, offsets):
                self._map_chunk_at(chunk, address + start)
                part = memoryview(region)[start:start + chunk["size"]]
                try:
                    _check(filename(chunk), part, chunk)
                finally:
                    part.release()  # no export may outlive the check: close() needs none
        except BaseException:
            region.close()
            raise
        return region

    def _map_chunk_at(self, chunk, address):
        name = filename(chunk)
        try:
            fd = os.open(self.path(name), os.O_RDONLY)
        except FileNotFoundError:
            raise CorruptBlob(f"blob {name} is missing") from None
        try:
            size = os.fstat(fd).st_size
            if size != chunk["size"]:
                raise CorruptBlob(f"blob {name} has {size} bytes, expected {chunk['size']}")
            _fixed_map(address, size, fd)
        finally:
            os.close(fd)

    def _read_chunks(self, chunks, size):
        data = bytearray(size)
        view, start = memoryview(data), 0
        for chunk in chunks:
            name = filename(chunk)
            try:
                with open(self.path(name), "rb") as file:
                    got = file.readinto(view[start:start + chunk["size"]])
                    extra = file.read(1)
            except FileNotFoundError:
                raise CorruptBlob(f"blob {name} is missing") from None
            if got != chunk["size"] or extra:
                raise CorruptBlob(f"blob {name} does not have {chunk['size']} bytes")
            _check(name, view[start:start + chunk["size"]], chunk)
            start += chunk["size"]
        return data

    def remove(self, names):
        for name in names:
            _remove_quietly(self.path(name))

    def sweep(self, keep, now=None):
        """Delete blob files not in ``keep`` and temp files older than a minute (in the blob
        directories, and the manifest's and reports' in the state directory above them); return a
        count. Young temp files are left alone: a writer may still be working on them.
        """
        now = time.time() if now is None else now
        removed = 0
        for directory in _subdirs(self.root):
            for entry in _scandir(directory):
                if entry.name.startswith(TEMP_PREFIX):
                    if _age(entry, now) < TEMP_MAX_AGE_SECONDS:
                        continue
                elif entry.name in keep:
                    continue
                _remove_quietly(entry.path)
                removed += 1
        for entry in _scandir(os.path.dirname(self.root)):
            if TEMP_PREFIX in entry.name and _age(entry, now) >= TEMP_MAX_AGE_SECONDS:
                _remove_quietly(entry.path)
                removed += 1
        return removed

    def _make_dir(self, directory):
        if os.path.isdir(directory):
            return
        for path in (self.root, directory):
            try:
                os.mkdir(path, 0o700)
            except FileExistsError:
                continue
            self._unsynced_dirs.add(os.path.dirname(path))


def _check(name, data, blob):
    if len(data) != blob["size"]:
        raise CorruptBlob(f"blob {name} has {len(data)} bytes, expected {blob['size']}")
    if content_id(data) != blob["id"]:
        raise CorruptBlob(f"blob {name} does not match its checksum")


def _write_all(fd, view):
    start = 0
    while start < view.nbytes:
        start += os.write(fd, view[start:start + RAW_CHUNK_BYTES])


def _copy_hash_write(fd, view):
    """Copy ``view`` a piece at a time, hash and write each piece from that copy; the hash."""
    hasher = xxhash.xxh3_128()
    piece = bytearray(min(RAW_CHUNK_BYTES, view.nbytes))
    for start in range(0, view.nbytes, len(piece) or 1):
        part = memoryview(piece)[:min(len(piece), view.nbytes - start)]
        part[:] = view[start:start + len(part)]
        hasher.update(part)
        _write_all(fd, part)
    return hasher.hexdigest()


def chunk_views(view):
    """``view`` (a buffer of any shape) as the byte views of its chunks, in order: one view for a
    buffer of at most ``CHUNK_BYTES``."""
    view = memoryview(view).cast("B")
    if view.nbytes <= CHUNK_BYTES:
        return [view]
    return [view[start:start + CHUNK_BYTES] for start in range(0, view.nbytes, CHUNK_BYTES)]


def _address_of(region):
    """The address of a writable buffer (the export is released before returning)."""
    anchor = ctypes.c_char.from_buffer(region)
    try:
        return ctypes.addressof(anchor)
    finally:
        del anchor


def release_pages(view):
    """Drop this process's pages of the whole pages inside ``view`` (``MADV_DONTNEED``): for a
    save child, whose copy-on-write image shares them with the kernel, this ends the sharing, so
    a kernel that writes them next copies nothing. The child must never read ``view`` again (it
    would read zeros). A read-only buffer, or a platform without ``madvise``, is left as is."""
    if _madvise is None:
        return
    view = memoryview(view)
    if view.readonly or view.nbytes < mmap.PAGESIZE:
        return
    address = _address_of(view.cast("B"))
    start = -(-address // mmap.PAGESIZE) * mmap.PAGESIZE
    end = (address + view.nbytes) // mmap.PAGESIZE * mmap.PAGESIZE
    if end > start:
        _madvise(start, end - start, MADV_DONTNEED)  # a failure leaves the pages shared: harmless


def address_span(view):
    """``(start, end)`` addresses of a writable buffer's memory, or None (read-only, empty)."""
    view = memoryview(view)
    if view.readonly or not view.nbytes or not view.contiguous:
        return None
    address = _address_of(view.cast("B"))
    return address, address + view.nbytes


MADV_DONTNEED = 4


def _load_madvise():
    if not sys.platform.startswith("linux"):
        return None
    try:
        native = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    native.restype = ctypes.c_int
    native.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    return native


_madvise = _load_madvise()


def _load_fixed_map():
    """``map(address, size, fd)``: map ``fd`` private and writable over ``address`` (Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        native = libc.mmap
    except (OSError, AttributeError):
        return None
    native.restype = ctypes.c_void_p
    native.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                       ctypes.c_long)
    map_fixed = 0x10  # MAP_FIXED on every Linux architecture

    def fixed_map(address, size, fd):
        got = native(address, size, mmap.PROT_READ | mmap.PROT_WRITE,
                     mmap.MAP_PRIVATE | map_fixed, fd, 0)
        if got != address:
            error = ctypes.get_errno()
            raise OSError(error, f"mmap of a chunk failed: {os.strerror(error)}")

    return fixed_map


_fixed_map = _load_fixed_map()


def write_then_rename(data, final, temp_prefix, before_rename=None, sync=True):
    """Write ``data`` to a new 0600 temp file beside ``final`` (named ``temp_prefix`` + pid +
    random), fsync it (unless not ``sync``: a file whose loss in a machine crash costs nothing
    but itself) and rename it to ``final``. The temp file is removed if anything (even
    KeyboardInterrupt) stops the write. The directory is not fsynced: the caller decides when.
    ``before_rename(fd)``, when given, runs on the written temp file before the fsync (the
    toolbox's ``write``/``edit`` give it the old file's mode, owner and extended attributes)."""
    temp = _temp_path(os.path.dirname(final), temp_prefix)
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with open(fd, "wb", closefd=True) as file:
            file.write(data)
            file.flush()
            if before_rename is not None:
                before_rename(file.fileno())
            if sync:
                os.fsync(file.fileno())
        os.rename(temp, final)
    except BaseException:
        _remove_quietly(temp)
        raise


def _temp_path(directory, temp_prefix):
    return os.path.join(directory, f"{temp_prefix}{os.getpid()}-{secrets.token_hex(4)}")


def fsync_dir(directory):
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _subdirs(root):
    return [entry.path for entry in _scandir(root) if entry.is_dir(follow_symlinks=False)]


def _scandir(directory):
    try:
        with os.scandir(directory) as entries:
            return list(entries)
    except FileNotFoundError:
        return []


def _age(entry, now):
    try:
        return now - entry.stat(follow_symlinks=False).st_mtime
    except FileNotFoundError:
        return 0.0


def _remove_quietly(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass  # already gone: the goal of removing it is met
