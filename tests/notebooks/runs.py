"""The two runs of one notebook: through nbclient (Jupyter) and through `pi-repl mcp`.

Each returns ``{index of the code cell in the notebook: Cell}``. The Jupyter run keeps every
``execute_reply`` (for pager payloads); the pi-repl run speaks MCP over stdio as any client
does: ``initialize``, ``notifications/initialized``, ``tools/list``, then one
``tools/call execute`` per code cell, in order.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from cell_record import Cell, jupyter_cell, mcp_cell

KERNEL_START_TIMEOUT_S = 180
"""Bound on the wait for a kernel (either run) to start on a busy machine."""

CELL_TIMEOUT_S = 300
"""Bound on the wait for one cell's result (a guard against a hang, not a timing assertion)."""

SERVER_EXIT_TIMEOUT_S = 30
"""Bound on the wait for `pi-repl mcp` to exit once its stdin is closed."""

MCP_PROTOCOL_VERSION = "2025-06-18"


def code_cells(notebook) -> list[tuple[int, str]]:
    """(index in the notebook, source) of each code cell Jupyter would run."""
    return [
        (index, cell.source)
        for index, cell in enumerate(notebook.cells)
        if cell.cell_type == "code" and cell.source.strip()
    ]


KERNEL_NAME = "pi-repl-corpus"
"""The Jupyter run's kernelspec, written by ``write_kernelspec``: never a user's own `python3`."""


def write_kernelspec(jupyter_path: Path) -> None:
    """A kernelspec under ``jupyter_path`` (to be put first on JUPYTER_PATH) that starts
    ipykernel with this very interpreter, the one `pi-repl mcp` gets as ``--python``."""
    spec = jupyter_path / "kernels" / KERNEL_NAME
    spec.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    kernel = {"argv": argv, "display_name": "pi-repl corpus", "language": "python"}
    (spec / "kernel.json").write_text(json.dumps(kernel))


def run_in_jupyter(path: Path, cwd: Path) -> dict[int, Cell]:
    notebook = nbformat.read(path, as_version=4)
    replies: dict[int, dict] = {}

    def keep_reply(cell, cell_index, execute_reply):
        replies[cell_index] = execute_reply

    client = NotebookClient(
        notebook,
        allow_errors=True,
        timeout=CELL_TIMEOUT_S,
        startup_timeout=KERNEL_START_TIMEOUT_S,
        kernel_name=KERNEL_NAME,
        resources={"metadata": {"path": str(cwd)}},
        on_cell_executed=keep_reply,
    )
    client.execute()
    return {
        index: jupyter_cell(notebook.cells[index], replies[index])
        for index, _ in code_cells(notebook)
    }


class McpServer:
    """`pi-repl mcp` as a child process, spoken to in newline-delimited JSON-RPC."""

    def __init__(self, binary: Path, home: Path, cwd: Path, log: Path):
        self.log = log.open("wb")
        self.process = subprocess.Popen(
            [str(binary), "mcp", "--python", sys.executable, "--cwd", str(cwd)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            env={**os.environ, "PI_REPL_HOME": str(home)},
        )
        self.messages: queue.Queue = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self.next_id = 0

    def _read(self):
        for line in self.process.stdout:
            self.messages.put(json.loads(line))
        self.messages.put(None)

    def send(self, message: dict):
        self.process.stdin.write(json.dumps(message).encode() + b"\n")
        self.process.stdin.flush()

    def request(self, method: str, params: dict, timeout: float) -> dict:
        self.next_id += 1
        request_id = self.next_id
        self.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        while True:
            try:
                message = self.messages.get(timeout=timeout)
            except queue.Empty:
                raise AssertionError(
                    f"no answer to {method} within {timeout} s; log: {self.log.name}"
                ) from None
            if message is None:
                raise AssertionError(f"pi-repl mcp closed stdout; its log: {self.log.name}")
            if message.get("id") == request_id and "method" not in message:
                if "error" in message:
                    raise AssertionError(f"{method} failed: {message['error']}")
                return message["result"]

    def close(self):
        self.process.stdin.close()
        try:
            self.process.wait(timeout=SERVER_EXIT_TIMEOUT_S)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()
            self.log.close()


def run_in_pi_repl(path: Path, binary: Path, home: Path, cwd: Path) -> tuple[dict[int, Cell], str]:
    notebook = nbformat.read(path, as_version=4)
    server = McpServer(binary, home, cwd, home.parent / "pi-repl-mcp.log")
    cells = {}
    try:
        server.request(
            "initialize",
            {
                "protocolVersion": MCP_PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "pi-repl-notebook-corpus", "version": "0"},
            },
            KERNEL_START_TIMEOUT_S,
        )
        server.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        tools = server.request("tools/list", {}, KERNEL_START_TIMEOUT_S)
        assert [tool["name"] for tool in tools["tools"]] == ["execute"], tools
        for index, source in code_cells(notebook):
            result = server.request(
                "tools/call",
                {"name": "execute", "arguments": {"code": source}},
                CELL_TIMEOUT_S,
            )
            cells[index] = mcp_cell(result)
    finally:
        server.close()
    return cells, server.log.name
