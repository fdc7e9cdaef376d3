"""Sub-agents from a cell: asking pi-repl's host to spawn or cancel a child, and reading the
children's records.

A child is not started by the kernel: the processes a cell starts are ended when the cell is
aborted, and a child outlives its cell. The kernel asks the host over the same stdin channel as
``llm_query`` (an ``input_request`` marked ``"pi_repl": "agent/1"``; ``src/agents/requests.rs``
documents the wire format), and the host starts a ``pi-repl agent`` process.

The record of each child is a JSON file the host writes (``<workspace>/agents/<id>.json``,
beside its transcript ``<id>.log`` and its own workspace ``<id>/``). Everything that reads a
child here reads that file: status, result, waiting (polling the file, so the stdin channel
stays free for ``llm_query`` from other threads and an interrupt ends the wait at once), and the
tree (one directory walk). A ``running`` record whose process is gone reads ``lost``.

Owns: the request, ``AgentHandle``, the exceptions, the walk. The user-facing functions are the
default helper ``toolbox/sub_agents.py``.
"""

import json
import os
import time

from . import host_requests, namespace

MARKER = "agent/1"

SETTLED = ("completed", "errored", "cancelled", "lost")


class AgentError(Exception):
    """A sub-agent request was refused, or a child did not complete."""


class AgentLimitExceeded(AgentError):
    """A limit refused the spawn: depth (``PI_REPL_AGENT_MAX_DEPTH``) or children running at once
    (``PI_REPL_AGENT_MAX_RUNNING``)."""


class AgentFailed(AgentError):
    """The child ended without a final answer; ``.status`` and ``.error`` say how."""

    def __init__(self, handle, status, error):
        super().__init__(f"sub-agent {handle.id} {status}: {error or 'no reason given'}")
        self.handle = handle
        self.status = status
        self.error = error


_KINDS = {"AgentError": AgentError, "AgentLimitExceeded": AgentLimitExceeded}


def request(op, **fields):
    """Ask the host; return its reply dict, or raise the ``AgentError`` it names."""
    value = host_requests.send(MARKER, {"op": op, **fields})
    if value is None:
        raise AgentError("sub-agents run only inside a pi-repl kernel")
    try:
        reply = json.loads(value)
    except ValueError:
        raise AgentError(
            "pi-repl's host did not answer the sub-agent request (it can only be made while a "
            "cell runs, or this host is older than this module)"
        ) from None
    if not reply.get("ok"):
        kind = _KINDS.get(reply.get("error"), AgentError)
        raise kind(reply.get("message") or "the sub-agent request was refused")
    return reply


def fork_live():
    """A live copy of this kernel for one child: ``(fields, prepared, pid)``, the fields for the
    spawn request (``live``: the copy to adopt) and what to discard if the spawn is refused.
    Where no live copy can be made the fields say why (``fallback``) and the workspace is
    committed instead, so the child starts from the snapshot (``(fields, None, None)``).
    Raises ``AgentLimitExceeded`` when free memory is short of what the copy may need."""
    from . import live_fork

    why = live_fork.unavailable_reason()
    if why is None:
        short = live_fork.memory_shortfall()
        if short is not None:
            raise AgentLimitExceeded(
                f"spawn_agent refused: {short}; free memory (del large values you no longer "
                "need), or pass fork=False (the child starts empty)")
        threads = live_fork.threads_left()
        try:
            prepared = live_fork.prepare()
        except OSError as error:
            why = f"its runtime directory could not be made: {error}"
        else:
            try:
                pid = live_fork.fork_into(prepared)
            except live_fork.LiveForkError as error:
                live_fork.discard(prepared)
                why = str(error)
            else:
                live = {"dir": prepared.directory, "pid": pid,
                        "pid_namespace": os.readlink("/proc/self/ns/pid"), "tag": prepared.tag,
                        "parent_cell": 0, "threads_left": threads}
                return {"live": live}, prepared, pid
    commit_for_fork()
    return {"fallback": why}, None, None


def discard_fork(prepared, pid):
    """Undo ``fork_live`` for a spawn that did not happen."""
    if prepared is not None:
        from . import live_fork

        live_fork.discard(prepared, pid)


def commit_for_fork():
    """Make the workspace's snapshot current, so a forked child sees this cell's data too.

    In a durable session the namespace is saved now, in the kernel (what changed since the last
    save: a large change costs its pickling time here), after a background save still running
    has ended. In an ephemeral workspace there is no store, and the host refuses ``fork=True``.
    """
    from . import snapshot

    summary = snapshot.save_for_fork()
    if summary is not None and summary.get("error") and not summary.get("committed"):
        raise AgentError(f"could not snapshot the workspace for the fork: {summary['error']}")


def process_start(pid):
    """The start time of ``pid`` in clock ticks since boot, or None when it does not run."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            line = stat.read()
    except OSError:
        return None
    fields = line[line.rfind(")") + 2:].split()
    if not fields or fields[0] in ("Z", "X"):
        return None  # ended (an orphan may stay a zombie under an ancestor that never reaps)
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


def read_record(path):
    """The record at ``path`` with its status as a reader should believe it (``lost``)."""
    for _ in range(5):
        try:
            with open(path) as file:
                record = json.load(file)
            break
        except ValueError:
            time.sleep(0.01)  # never half-written (atomic rename); a torn read is retried
    else:
        raise AgentError(f"the record {path} cannot be read")
    if record.get("status") == "running" and not _still_running(record):
        record["status"] = "lost"
        record.setdefault("error", None)
        record["error"] = record["error"] or (
            "its process is gone and its record was never finished (the pi-repl that "
            "started it was killed, or the child was)"
        )
    return record


def _still_running(record):
    """Whether the process of a ``running`` record still runs. In a PID namespace of its own the
    kernel cannot see it: it believes a record of its own host (which finishes the record of
    every child that ends while it lives) and takes another host's as lost."""
    if namespace.isolated():
        host = record.get("host")
        return host is not None and host == os.environ.get(namespace.HOST_ID_VAR)
    pid, start = record.get("pid"), record.get("pid_start")
    return pid is not None and start is not None and process_start(pid) == start


class AgentHandle:
    """A sub-agent: its record file is the truth, read afresh by every property."""

    def __init__(self, record_path):
        self._path = str(record_path)
        self.id = os.path.basename(self._path)[: -len(".json")]

    @property
    def record(self):
        """The whole record (task, parent_cell, pid, status, times, usage, result, ...)."""
        return read_record(self._path)

    @property
    def status(self):
        """``running``, ``completed``, ``errored``, ``cancelled`` or ``lost``."""
        return self.record["status"]

    @property
    def result(self):
        """The final answer once completed, else None."""
        record = self.record
        return record.get("result") if record["status"] == "completed" else None

    @property
    def error(self):
        """Why it did not complete, else None."""
        return self.record.get("error")

    @property
    def output_path(self):
        """The child's transcript: its model's cells and their output."""
        return self.record.get("output")

    @property
    def name(self):
        return self.record.get("name")

    @property
    def workspace(self):
        """The child's own workspace directory (``agents/<id>/``: its snapshot, its outputs)."""
        return self._path[: -len(".json")]

    def wait(self, timeout=None):
        """Wait for the child to end; return its final answer.

        Raises ``AgentFailed`` when it errored, was cancelled or is lost, and ``TimeoutError``
        when ``timeout`` seconds pass first (the child goes on).
        """
        record = _wait_settled(self._path, timeout)
        if record is None:
            raise TimeoutError(f"sub-agent {self.id} is still running after {timeout} s")
        if record["status"] != "completed":
            raise AgentFailed(self, record["status"], record.get("error"))
        return record.get("result")

    def cancel(self):
        """End the child (its record then says ``cancelled``); returns its status after."""
        reply = request("cancel", id=self.id)
        if reply.get("cancelling"):
            record = _wait_settled(self._path, 30)
            return record["status"] if record else "running"
        return reply.get("status") or self.status

    def __repr__(self):
        try:
            record = self.record
        except AgentError as error:
            return f"<sub-agent {self.id}: {error}>"
        label = f" {record['name']!r}" if record.get("name") else ""
        elapsed = record.get("elapsed_ms")
        took = f" {elapsed / 1000:.1f}s" if elapsed is not None else ""
        depth = record.get("depth", 1)
        indent = "  " * (depth - 1)
        status = record["status"]
        if status == "completed":
            tail = _short(record.get("result"))
        elif status == "running":
            tail = f"step {record.get('steps', 0)}: {_short(record.get('last_line'))}"
        else:
            tail = _short(record.get("error"))
        return f"{indent}<{self.id}{label} {status}{took}: {tail}>"


def _short(text, limit=80):
    text = " ".join(str(text or "").split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _wait_settled(path, timeout):
    """The settled record, or None after ``timeout`` seconds."""
    deadline = None if timeout is None else time.monotonic() + timeout
    pause = 0.02
    while True:
        record = read_record(path)
        if record["status"] in SETTLED:
            return record
        if deadline is not None and time.monotonic() >= deadline:
            return None
        left = pause if deadline is None else max(0.0, min(pause, deadline - time.monotonic()))
        time.sleep(left)
        pause = min(pause * 1.5, 0.25)


def walk(agents_dir):
    """Handles for every record under ``agents_dir``, at every depth, parents first."""
    found = []
    _walk_into(agents_dir, found)
    return found


def _walk_into(agents_dir, found):
    try:
        names = os.listdir(agents_dir)
    except OSError:
        return
    ids = sorted((n[: -len(".json")] for n in names if n.endswith(".json")), key=_id_order)
    for agent_id in ids:
        found.append(AgentHandle(os.path.join(agents_dir, agent_id + ".json")))
        _walk_into(os.path.join(agents_dir, agent_id, "agents"), found)


def _id_order(agent_id):
    number = agent_id.rpartition("-")[2]
    return (int(number) if number.isdigit() else float("inf"), agent_id)
