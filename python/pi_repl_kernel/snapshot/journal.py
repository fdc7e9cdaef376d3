"""The revive journal and the poisoned marks: how a binding that killed the kernel is skipped.

Owns: ``<state_dir>/journal`` and ``<state_dir>/poisoned.json``. Does not own: unpickling.

Invariants:

- Before a binding is unpickled, ``start <name>`` is appended to the journal and made durable
  (write + fsync); after it, ``done <name>`` is appended (written at once; made durable by the
  next ``start``'s fsync or ``sync``). The first line a process appends is ``host <token>``: who
  its parent (the pi-repl host) is (pid and start time). An unpickle that hangs, exits or crashes
  the process leaves ``start X`` without ``done X``.
- An unfinished ``start X`` is evidence against X only as far as it goes. The next restore
  compares the ``host`` token in force at that ``start`` with its own parent:

  - the same host: the host lived on while the kernel died inside X's unpickle (a crash, an
    exit, or the host killing a revive that hung): X is **poisoned** at once;
  - another host: the host itself was killed or stopped (its kernel goes with it), which says
    nothing about X: X gets one **strike**. A second strike in a row (the revive of the same
    stored value cut short again, with no finished revive of it in between) poisons it.

  A finished revive of X (loaded or raised) clears its strike. A poisoned binding is skipped
  while its stored value is the one marked; a save of a new value for the name clears the mark.
- The first restore of a process empties the journal after reading it, so it never grows
  beyond one process's revive.
"""

import json
import os

from .. import namespace
from . import manifest as snapshot_manifest

JOURNAL_NAME = "journal"
POISONED_NAME = "poisoned.json"
REASON_KERNEL_DIED = ("crashed, exited or hung the kernel while reviving, with pi-repl still "
                      "running (skipped until the name is saved anew)")
REASON_TWICE = "its revive was cut short twice in a row (skipped until the name is saved anew)"


def host_token():
    """Who the pi-repl host is: its pid and, where ``/proc`` tells it, its start time (so a
    reused pid is not mistaken for the same host). The host's own word (``HOST_ID_VAR``) when it
    gave it, else this process's parent."""
    given = os.environ.get(namespace.HOST_ID_VAR)
    if given:
        return given
    parent = os.getppid()
    try:
        with open(f"/proc/{parent}/stat", "rb") as file:
            fields = file.read().rsplit(b")", 1)[1].split()
        return f"{parent}.{fields[19].decode('ascii')}"  # field 22 of stat: start time
    except (OSError, IndexError, UnicodeDecodeError):
        return str(parent)


class Journal:
    """Append-only ``start``/``done`` lines around each unpickle."""

    def __init__(self, state_dir):
        self.path = os.path.join(state_dir, JOURNAL_NAME)
        self._file = None

    def unfinished(self):
        """``(name, host token)`` of each ``start`` line with no later ``done`` line, in journal
        order; the token is that of the ``host`` line before it (None if there is none)."""
        try:
            with open(self.path, "rb") as file:
                lines = file.read().decode("utf-8", "replace").splitlines()
        except FileNotFoundError:
            return []
        open_names, host = {}, None
        for line in lines:
            word, _, name = line.partition(" ")
            if word == "host":
                host = name
            elif word == "start" and name:
                open_names[name] = host
            elif word == "done":
                open_names.pop(name, None)
        return list(open_names.items())

    def is_empty(self):
        try:
            return os.path.getsize(self.path) == 0
        except FileNotFoundError:
            return True

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
            line = f"host {host_token()}\n{line}"
        self._file.write(line.encode("utf-8"))
        if durable:
            os.fsync(self._file.fileno())


class PoisonMarks:
    """``poisoned.json``: ``{name: {"stream": blob id, "strikes": n, "reason": text}}``, persisted
    atomically. A mark with a ``reason`` is a poisoning; one without is a strike (a suspicion).
    A mark written before strikes existed (a ``reason`` and no ``strikes``) was made on weaker
    evidence, so it counts as one strike."""

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
        loaded = {}
        for name, mark in marks.items():
            if not isinstance(mark, dict) or not isinstance(mark.get("stream"), str):
                continue
            if not isinstance(mark.get("strikes"), int):
                mark = {"stream": mark["stream"], "strikes": 1}  # an old, weaker mark
            loaded[name] = mark
        return loaded

    def is_poisoned(self, name, stream_id):
        mark = self.marks.get(name)
        return mark is not None and mark["stream"] == stream_id and "reason" in mark

    def reason(self, name):
        return self.marks.get(name, {}).get("reason", REASON_KERNEL_DIED)

    def record(self, evidence):
        """Record ``(name, stream id, died under this host)`` for each unfinished revive: poison
        at once when the kernel died under a host that is still running, otherwise add a strike
        (two in a row poison). Persist."""
        for name, stream_id, same_host in evidence:
            mark = self.marks.get(name)
            strikes = 1
            if mark is not None and mark["stream"] == stream_id:
                strikes = mark["strikes"] + 1
            mark = {"stream": stream_id, "strikes": strikes}
            if same_host:
                mark["reason"] = REASON_KERNEL_DIED
            elif strikes >= 2:
                mark["reason"] = REASON_TWICE
            self.marks[name] = mark
        self._persist()

    def finished(self, name):
        """A revive of ``name`` finished (loaded or raised): it did not kill anything this time,
        so a strike against it is forgotten."""
        mark = self.marks.get(name)
        if mark is not None and "reason" not in mark:
            self.clear([name])

    def clear(self, names):
        """Forget the marks of ``names`` (saved anew, or no longer in the snapshot)."""
        removed = [name for name in names if self.marks.pop(name, None) is not None]
        if removed:
            self._persist()

    def _persist(self):
        data = json.dumps(self.marks, sort_keys=True, indent=1).encode("utf-8")
        snapshot_manifest.write_atomically(self.path, data)
