"""pi-repl default helper: sub-agents (``spawn_agent``, ``wait_all``, ``agents``) and, inside a
sub-agent, ``final_answer``.

A helper file like any user's (see docs/helpers.md); the channel to the host and the handles
are ``pi_repl_kernel.agents``, where the exceptions live
(``from pi_repl_kernel.agents import AgentError``). docs/subagents.md has the whole story.
"""

from pi_repl_kernel import agents as _agents

helper_description = (
    "Sub-agents: spawn_agent(task) runs a child agent in a copy of this workspace, "
    "spawn_agents(tasks) several from one state; handles to wait for, wait_all for fan-in, "
    "adopt_agent(handle) takes a finished child's workspace as this one's, agents() for the tree."
)

__all__ = ["spawn_agent", "spawn_agents", "wait_all", "adopt_agent", "agents", "final_answer"]

_root = None


def spawn_agent(task, *, name=None, model=None, budget=None, fork=True):
    """Start a sub-agent on a task; return its handle at once, while it works on its own.

    The child is an agent loop in a workspace of its own: a model (the one answering
    ``llm_query`` here) writes Python cells, sees their output, and ends with
    ``final_answer(text)``. Aborting this cell does not stop it; ending the session does. Its
    record is ``agents/<id>.json`` in this session's directory, its transcript ``<id>.log``.
    See docs/subagents.md.

    Args:
        task: what the child should do, a str (its model sees it first).
        name: a label for listings (``agents()``).
        model: a model to prefer for the child (a hint; who answers decides).
        budget: a dict with any of ``seconds`` (wall time, default 600), ``tokens`` (model
            input + output, default 200000) and ``steps`` (cells, default 30).
        fork: start the child's workspace as a live copy of this one, made now (this kernel is
            forked: every variable as it is at this line, shared copy-on-write, in milliseconds
            whatever its size); where a live copy cannot be made (a remote or kernelspec kernel,
            CUDA in use) the child starts from this workspace's snapshot instead, saved first,
            which needs ``--session``, and its record says why (``fork_fallback``). ``False``
            starts it empty.

    Returns:
        An ``AgentHandle``: ``.status`` (running, completed, errored, cancelled, lost),
        ``.wait(timeout=None)`` (the final answer), ``.result``, ``.error``, ``.output_path``,
        ``.record``, ``.cancel()``.

    Raises:
        AgentLimitExceeded: too deep (PI_REPL_AGENT_MAX_DEPTH, default 2) or too many children
            running here (PI_REPL_AGENT_MAX_RUNNING, default 4).
        AgentError: the spawn was refused (``fork=True`` in an ephemeral workspace, ...).
        ValueError, TypeError: a malformed task or budget.
    """
    _check_task(task)
    _check_budget(budget)
    return _spawn(task, name, model, budget, fork)


def spawn_agents(tasks, *, name=None, model=None, budget=None, fork=True):
    """Start one sub-agent per task, all from the same state of this workspace (best-of-N, a
    search over ideas); return their handles in the tasks' order, at once.

    With ``fork`` every child gets its own live copy of this one state (or, where no live copy
    can be made, the one snapshot saved first). All or none: when the host refuses one (a
    limit), the ones already started are cancelled and the refusal is raised. Arguments as for
    ``spawn_agent``; ``name`` becomes ``name-1``, ``name-2``, ... Random generators are
    reseeded in each child (Python's ``random`` and numpy's global one), so children that
    should differ differ; seed them again in the task for ones that should not.

    Raises:
        AgentLimitExceeded, AgentError: as ``spawn_agent``; nothing keeps running then.
        ValueError, TypeError: malformed tasks or budget (checked before anything starts).
    """
    if isinstance(tasks, str) or not hasattr(tasks, "__iter__"):
        raise TypeError("tasks must be a list of str, one per sub-agent")
    tasks = list(tasks)
    if not tasks:
        raise ValueError("tasks is empty: give one task per sub-agent")
    for task in tasks:
        _check_task(task)
    _check_budget(budget)
    handles = []
    try:
        for number, task in enumerate(tasks, 1):
            label = f"{name}-{number}" if name is not None else None
            handles.append(_spawn(task, label, model, budget, fork))
    except BaseException:
        for handle in handles:
            handle.cancel()
        raise
    return handles


def adopt_agent(handle):
    """Take a finished sub-agent's workspace as this one's: its saved bindings replace this
    namespace's (names it lacks are removed), as a rewind does, and what changed is printed.

    The state this workspace held before is saved first: rewinding to the cell before this one
    (``execute {"rewind": N}``) returns to it. Files, processes and anything outside the
    namespace are not taken over. Needs a durable session (``--session``).

    Raises:
        AgentError: the child still runs (wait for it first), or this workspace is ephemeral.
        RewindError (shown as ``error:``/``hint:``): its workspace cannot be read (no saved
            state, another key's, damaged); nothing changed.
    """
    if not isinstance(handle, _agents.AgentHandle):
        raise TypeError("adopt_agent takes a handle from spawn_agent or spawn_agents")
    status = handle.status
    if status == "running":
        raise _agents.AgentError(
            f"sub-agent {handle.id} is still running: wait for it first ({handle.id}.wait())")
    from pi_repl_kernel import snapshot

    if snapshot._store is None:
        raise _agents.AgentError(
            "this workspace is ephemeral: it has no snapshot to take a sub-agent's workspace "
            "into (start pi-repl with --session NAME)")
    snapshot.adopt(handle.workspace, f"sub-agent {handle.id} ({status})")


def _spawn(task, name, model, budget, fork):
    fields = {"task": task, "fork": bool(fork)}
    for key, value in (("name", name), ("model", model), ("budget", budget)):
        if value is not None:
            fields[key] = value
    prepared = pid = None
    if fork:
        offer, prepared, pid = _agents.fork_live()
        fields.update(offer)
    try:
        reply = _agents.request("spawn", **fields)
    except BaseException:
        _agents.discard_fork(prepared, pid)
        raise
    record = reply["agent"]
    path = record["output"][: -len(".log")] + ".json"
    return _agents.AgentHandle(path)


def _check_task(task):
    if not isinstance(task, str) or not task.strip():
        raise ValueError("task must be a non-empty str: what the sub-agent should do")


def _check_budget(budget):
    if budget is None:
        return
    if not isinstance(budget, dict):
        raise TypeError("budget must be a dict: {'seconds': ..., 'tokens': ..., 'steps': ...}")
    unknown = set(budget) - {"seconds", "tokens", "steps"}
    if unknown:
        raise ValueError(f"unknown budget keys {sorted(unknown)}: use seconds, tokens, steps")
    for key, value in budget.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"budget[{key!r}] must be a positive int")


def wait_all(handles, timeout=None):
    """Wait for several sub-agents (fan-in); return their answers in order.

    The children run on while this waits; nothing here holds the host, so ``llm_query`` from
    other threads and an interrupt keep working. One failure does not lose the others: its
    place holds the exception instead of the answer.

    Args:
        handles: ``AgentHandle``s from ``spawn_agent`` (or ``agents()``).
        timeout: the most seconds to wait for all of them together; None waits for the end.

    Returns:
        A list as long as ``handles``: each item is the final answer (a str), or the exception
        that handle's ``wait`` would raise.

    Raises:
        Nothing for a child's failure: ``AgentFailed`` (errored, cancelled, lost) and
        ``TimeoutError`` (still running at the deadline) are returned in its place.
        KeyboardInterrupt: the cell was interrupted (the children go on).
    """
    import time

    handles = list(handles)
    deadline = None if timeout is None else time.monotonic() + timeout
    results = []
    for handle in handles:
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            results.append(handle.wait(timeout=left))
        except (_agents.AgentError, TimeoutError) as error:
            results.append(error)
    return results


def agents():
    """List every sub-agent of this workspace, at every depth; children follow their parent.

    Read from the records on disk in one directory walk, so it also shows the children of
    earlier runs of this session (after a restart of pi-repl) and the children's own
    children. A record left ``running`` by a process that is gone reads ``lost``.

    Returns:
        A list of ``AgentHandle``s; printing it shows one line each (id, name, status, time,
        answer or error or last line), indented by depth. ``h.record`` has the whole record.

    Raises:
        AgentError: the host could not say where this workspace's records are (called outside
            a cell, or from a thread whose cell has ended).
    """
    global _root
    if _root is None:
        _root = _agents.request("root")["agents"]
    return _agents.walk(_root)


def final_answer(text):
    """End this sub-agent's task with ``text`` as its answer (for a sub-agent's model).

    The cell runs to its end; then the loop stops and the parent's handle reads
    ``completed`` with ``text`` as ``.result``. A later call in the same cell replaces an
    earlier one.

    Args:
        text: the answer; anything else is turned into a str.

    Returns:
        None (prints that the answer was recorded).

    Raises:
        AgentError: this workspace is not a sub-agent's (the session's own workspace has no
            parent to answer; print the answer instead).
    """
    if not isinstance(text, str):
        text = str(text)
    _agents.request("final", text=text)
    print("final answer recorded; the task ends after this cell")
