"""pi-repl default helper: sub-agents (``spawn_agent``, ``wait_all``, ``agents``) and, inside a
sub-agent, ``final_answer``.

A helper file like any user's (see docs/helpers.md); the channel to the host and the handles
are ``pi_repl_kernel.agents``, where the exceptions live
(``from pi_repl_kernel.agents import AgentError``). docs/subagents.md has the whole story.
"""

from pi_repl_kernel import agents as _agents

helper_description = (
    "Sub-agents: spawn_agent(task) runs a child agent in a copy of this workspace; "
    "handles to wait for, wait_all for fan-in, agents() for the tree."
)

__all__ = ["spawn_agent", "wait_all", "agents", "final_answer"]

_root = None


def spawn_agent(task, *, name=None, model=None, budget=None, fork=True):
    """Start a sub-agent on ``task``; return its ``AgentHandle`` at once (it runs on its own).

    The child is an agent loop with its own workspace: a copy of this one's snapshot (this
    cell's data included) unless ``fork=False``. ``budget`` is a dict with any of ``seconds``
    (default 600), ``tokens`` (200000) and ``steps`` (30 cells). The handle has ``.status``,
    ``.wait(timeout=None)`` (the final answer), ``.result``, ``.output_path``, ``.cancel()``.
    Raises ``AgentLimitExceeded`` past the depth or running-children limits.
    """
    if not isinstance(task, str) or not task.strip():
        raise ValueError("task must be a non-empty str: what the sub-agent should do")
    if budget is not None:
        if not isinstance(budget, dict):
            raise TypeError("budget must be a dict: {'seconds': ..., 'tokens': ..., 'steps': ...}")
        unknown = set(budget) - {"seconds", "tokens", "steps"}
        if unknown:
            raise ValueError(f"unknown budget keys {sorted(unknown)}: use seconds, tokens, steps")
        for key, value in budget.items():
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"budget[{key!r}] must be a positive int")
    if fork:
        _agents.commit_for_fork()
    fields = {"task": task, "fork": bool(fork)}
    for key, value in (("name", name), ("model", model), ("budget", budget)):
        if value is not None:
            fields[key] = value
    reply = _agents.request("spawn", **fields)
    record = reply["agent"]
    path = record["output"][: -len(".log")] + ".json"
    return _agents.AgentHandle(path)


def wait_all(handles, timeout=None):
    """Wait for every handle, at most ``timeout`` seconds in all; answers in order.

    Each item is the final answer, or the exception that handle's ``wait`` would raise
    (``AgentFailed``, or ``TimeoutError`` for a child still running at the deadline): one
    failure loses nothing else.
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
    """Every sub-agent of this workspace, at every depth (children after their parent), read
    from their records on disk: also those of earlier runs of this session."""
    global _root
    if _root is None:
        _root = _agents.request("root")["agents"]
    return _agents.walk(_root)


def final_answer(text):
    """Inside a sub-agent: end the task with ``text`` as its answer (after this cell)."""
    if not isinstance(text, str):
        text = str(text)
    _agents.request("final", text=text)
    print("final answer recorded; the task ends after this cell")
