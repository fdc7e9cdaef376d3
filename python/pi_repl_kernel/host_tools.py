"""The host agent's own tools called from a cell: ``tools.<name>(**kwargs)``.

In pi (``pi --repl``) every tool of the pi session other than ``execute`` (pi's ``read`` and
``bash``, other extensions' tools: web search, MCP adapters, ...) can be called from a cell. The
call goes over the Jupyter stdin channel like ``llm_query`` (an ``input_request`` whose prompt is
JSON marked ``"pi_repl": "tool/1"``); pi-repl's host passes it to its MCP client, and the pi
extension checks the arguments against the tool's own schema and runs it
(``src/host_tools/`` and ``extension/src/host-tools.ts`` have the rest of the path).

Owns: sending one call and reading its answer, the exceptions a failed call raises, and
forwarding the images a tool returns into the cell's output (as ``display_data``, so they reach
the cell's tool result like any plotted image). The user-facing object is the default helper
``toolbox/tools.py``.

Outside pi no client runs tools for a cell: a call raises ``HostToolUnavailable`` saying so.
"""

import base64
import json

from . import host_requests

MARKER = "tool/1"
"""Marks a stdin request as a host-tool call (the host answers anything unmarked with "")."""


class HostToolError(Exception):
    """A host tool failed (it raised, or its result says it failed)."""


class HostToolUnavailable(HostToolError):
    """No host runs tools for this workspace (only pi does)."""


class HostToolArgumentsError(HostToolError, TypeError):
    """The arguments do not fit the tool's schema; the message shows its signature."""


class UnknownHostTool(HostToolError, AttributeError):
    """No tool of that name; the message names the nearest real one."""


class HostToolCancelled(HostToolError):
    """The call was cancelled (the cell was interrupted)."""


_KINDS = {
    cls.__name__: cls
    for cls in (HostToolError, HostToolUnavailable, HostToolArgumentsError, UnknownHostTool,
                HostToolCancelled)
}

def request(payload):
    """Send ``payload`` (a dict) marked as a host-tool request; return the host's answer dict."""
    value = host_requests.send(MARKER, payload)
    if value is None:
        raise HostToolUnavailable("host tools run only inside a pi-repl kernel")
    try:
        answer = json.loads(value)
    except ValueError:
        answer = None
    if not isinstance(answer, dict) or "ok" not in answer:
        raise HostToolError(
            "pi-repl's host did not answer the tool call (this kernel is not driven by pi-repl, "
            "or its host is older than this module)"
        )
    if not answer["ok"]:
        kind = _KINDS.get(answer.get("error"), HostToolError)
        raise kind(answer.get("message") or "the tool call failed")
    return answer


def call(name, arguments):
    """Run the host tool ``name`` with ``arguments``; return its text (images are displayed)."""
    answer = request({"name": name, "arguments": arguments})
    images = answer.get("images") or []
    if images:
        _display_images(images)
    return answer.get("text") or ""


def listing():
    """The tools the host offers: a list of ``{"name", "signature", "summary"}``."""
    return request({"list": True}).get("tools") or []


def _display_images(images):
    """Each image as ``display_data``: it reaches the cell's result like a plotted image."""
    from IPython.display import display

    for image in images:
        mime = image.get("mimeType") or "image/png"
        data = image.get("data") or ""
        try:
            base64.b64decode(data, validate=True)
        except (ValueError, TypeError):
            continue  # not an image the result could carry; its text still says what it was
        display({mime: data}, raw=True)

