"""Requests from a cell to pi-repl's host over the Jupyter stdin channel.

Owns: finding the running kernel, the marked JSON prompt of an ``input_request``, and the one
lock every kind of request takes, so ``llm_query`` (``model_requests``), sub-agents (``agents``) and host
tools (``host_tools``) called from different threads never interleave on the channel
(ipykernel's ``_input_request`` waits for one reply at a time). Does not own any request's
payload, the shape of its answer, or its exceptions: each caller does.
"""

import json
import threading

_lock = threading.Lock()


def reset_lock():
    """A new lock, for a forked copy of the kernel (``live_fork``): a thread of the parent that
    held the old one does not exist there to release it."""
    global _lock
    _lock = threading.Lock()


def send(marker, payload):
    """Send ``payload`` (a dict) marked ``{"pi_repl": marker}``; return the host's answer text,
    or ``None`` when this code does not run in a kernel (the caller raises its own error)."""
    kernel = _kernel()
    if kernel is None:
        return None
    message = json.dumps({"pi_repl": marker, **payload})
    with _lock:
        return kernel._input_request(
            message, kernel._parent_ident["shell"], kernel.get_parent("shell"), password=False
        )


def _kernel():
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    shell = get_ipython()
    return getattr(shell, "kernel", None) if shell is not None else None
