"""The revive journal and the poisoned marks: how a binding that killed the kernel is skipped.

Owns: ``<state_dir>/journal`` and ``<state_dir>/poisoned.json``. Does not own: unpickling.

Invariants:

- Before a binding is unpickled, ``start <name>`` is appended to the journal and made durable
  (write + fsync); after it, ``done <name>`` is appended (written at once; made durable by the
  next ``start``'s fsync or ``sync``). An unpickle that hangs, exits or crashes the process leaves
  ``start X`` without ``done X``: a process death never loses a completed write, so after a crash
  the unmatched ``start`` is always there. (Only an operating-system crash between a ``done``
  and the next fsync could leave a binding looking unfinished; it would then be skipped once.)
- At the start of every restore, each unmatched ``start X`` becomes a poisoned mark for X's
  stream blob in ``poisoned.json`` (written atomically) and the journal is emptied. A mark applies
  to that stored value only: once X is saved with a new value its mark is cleared.
"""

import json
import os

from . import snapshot_manifest

JOURNAL_NAME = "journal"
POISONED_NAME = "poisoned.json"
POISON_REASON = "crashed, exited or hung the kernel while reviving (skipped)"


class Journal:
    """Append-only ``start``/``done`` lines around each unpickle."""

    def __init__(self, state_dir):
        self.path = os.path.join(state_dir, JOURNAL_NAME)
        self._file = None

    def unfinished(self):
        """Names with a ``start`` line and no later ``done`` line, in journal order."""
        try:
            with open(self.path, "rb") as file:
                lines = file.read().decode("utf-8", "replace").splitlines()
        except FileNotFoundError:
            return []
        open_names = {}
        for line in lines:
            word, _, name = line.partition(" ")
            if word == "start" and name:
                open_names[name] = True
            elif word == "done":
                open_names.pop(name, None)
        return list(open_names)

    def reset(self):
        """Empty the journal (after its unfinished entries were turned into marks)."""
        self.close()
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def start(self, name):
        self._append(f"start {name}\n", durable=True)

    def done(self, name):
        self._append(f"done {name}\n", durable=False)

    def sync(self):
        if self._file is not None:
            os.fsync(self._file.fileno())

    def close(self):
        if self._file is not None:
            self._file.close()
            self._file = None

    def _append(self, line, durable):
        if self._file is None:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            self._file = open(fd, "ab", buffering=0)
        self._file.write(line.encode("utf-8"))
        if durable:
            os.fsync(self._file.fileno())


class PoisonMarks:
    """``poisoned.json``: ``{name: {"stream": blob id, "reason": text}}``, persisted atomically."""

    def __init__(self, state_dir):
        self.path = os.path.join(state_dir, POISONED_NAME)
        self.marks = self._load()

    def _load(self):
        try:
            with open(self.path, "rb") as file:
                marks = json.loads(file.read().decode("utf-8"))
        except FileNotFoundError:
            return {}
        except (ValueError, UnicodeDecodeError):
            return {}  # a damaged marks file: start over rather than refuse the whole restore
        if not isinstance(marks, dict):
            return {}
        return {name: mark for name, mark in marks.items()
                if isinstance(mark, dict) and isinstance(mark.get("stream"), str)}

    def is_poisoned(self, name, stream_id):
        mark = self.marks.get(name)
        return mark is not None and mark["stream"] == stream_id

    def reason(self, name):
        return self.marks.get(name, {}).get("reason", POISON_REASON)

    def mark(self, names_and_streams):
        """Mark each ``(name, stream id)`` as poisoned and persist."""
        for name, stream_id in names_and_streams:
            self.marks[name] = {"stream": stream_id, "reason": POISON_REASON}
        self._persist()

    def clear(self, names):
        """Forget the marks of ``names`` (saved anew, or no longer in the snapshot)."""
        removed = [name for name in names if self.marks.pop(name, None) is not None]
        if removed:
            self._persist()

    def _persist(self):
        data = json.dumps(self.marks, sort_keys=True, indent=1).encode("utf-8")
        snapshot_manifest.write_atomically(self.path, data)
