"""pi-repl default helper: ``tools``, the host agent's own tools called from a cell.

A helper file like any user's (see docs/helpers.md); the channel to the host is
``pi_repl_kernel.host_tools``, where the exceptions live
(``from pi_repl_kernel.host_tools import HostToolError``).
"""

from pi_repl_kernel import host_tools as _host_tools

helper_description = (
    "tools.<name>(**kwargs) calls a tool of the pi session (pi --repl only; the list is below): "
    "its text is the value, its images are shown."
)

__all__ = ["tools"]


class _HostTools:
    """The host agent's tools: ``tools.web_search(query="...")`` runs pi's ``web_search``.

    Arguments are keywords, checked against the tool's schema before it runs (a mismatch raises
    ``HostToolArgumentsError`` showing the signature; an unknown name raises ``UnknownHostTool``
    naming the nearest one). The value is the tool's text; its images are displayed in the cell.
    A tool that fails raises ``HostToolError``. Only pi offers tools: elsewhere every call raises
    ``HostToolUnavailable``. ``print(tools)`` lists them with their signatures.

    Raises:
        HostToolArgumentsError: the arguments do not match the tool's schema (or are positional).
        UnknownHostTool: no tool has that name; the message names the nearest one.
        HostToolError: the tool itself failed (its message), or the host could not run it.
        HostToolUnavailable: pi-repl is not running under pi, which alone offers its tools.
    """

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return _HostTool(name)

    def __call__(self, name, **arguments):
        """Call a tool by name (for names that are not Python identifiers)."""
        return _host_tools.call(name, arguments)

    def __dir__(self):
        try:
            return sorted(tool["name"] for tool in _host_tools.listing())
        except _host_tools.HostToolError:
            return []

    def __repr__(self):
        try:
            listed = _host_tools.listing()
        except _host_tools.HostToolError as error:
            return f"<host tools: {error}>"
        if not listed:
            return "<host tools: none besides execute>"
        lines = [f"tools.{tool['name']}{tool.get('signature') or '(...)'}"
                 + (f"  # {tool['summary']}" if tool.get("summary") else "")
                 for tool in listed]
        return "\n".join(lines)


class _HostTool:
    """One host tool: call it with keyword arguments."""

    def __init__(self, name):
        self._name = name

    def __call__(self, *args, **arguments):
        if args:
            raise _host_tools.HostToolArgumentsError(
                f"tools.{self._name} takes keyword arguments only (the names in its schema), "
                f"got {len(args)} positional"
            )
        return _host_tools.call(self._name, arguments)

    def __repr__(self):
        return f"<host tool {self._name}>"


tools = _HostTools()
