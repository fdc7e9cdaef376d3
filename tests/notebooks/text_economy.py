"""Text economy over the notebook corpus: what the model reads per cell (issue 22).

Runs every notebook of ``corpus/`` through each `pi-repl mcp` binary given (one ``tools/call
execute`` per code cell, as ``runs.py`` does), announcing itself with a client's name, and
through the peer, jupyter-mcp-server (one ``tools/call execute_code`` per code cell, over stdio,
each notebook with a kernel of its own on a Jupyter Server this script starts on 127.0.0.1 from
the peer's venv). It counts what each result hands a client: characters of text (every text
block), image blocks and their pixels; for the peer also the JSON of its ``structuredContent``,
which Claude Code and Codex show the model instead of the text (docs/mcp.md).

    PI_REPL_BIN=target/debug/pi-repl "$PI_REPL_TEST_PYTHON" tests/notebooks/text_economy.py \\
        [--baseline-bin OLD_BINARY] [--peer-venv target/peer-venv]

The peer's venv: ``python -m venv target/peer-venv && target/peer-venv/bin/pip install
jupyter-mcp-server==2.2.4 jupyter-server ipykernel numpy pandas matplotlib``. Both sides get the
corpus test's environment (inline matplotlib backend, seeded random generators).

Prints one row per notebook and run, then the totals with the ratio of each run's text to the
peer's (to the first row's without a peer). A measurement, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import os
import struct
import subprocess
import sys
import secrets
import socket
import tempfile
import time
import urllib.request
from pathlib import Path

import nbformat

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

from runs import (  # noqa: E402
    CELL_TIMEOUT_S,
    KERNEL_START_TIMEOUT_S,
    MCP_PROTOCOL_VERSION,
    McpServer,
    code_cells,
    write_kernelspec,
)
from test_corpus import INLINE_BACKEND, SEED_STARTUP  # noqa: E402

CORPUS = HERE / "corpus"

PEER_TOOL = "execute_code"


class StdioPeer:
    """A stdio MCP server spoken to in newline-delimited JSON-RPC (the peer)."""

    def __init__(self, argv: list[str], log: Path, cwd: Path):
        self.log = log.open("wb")
        # Its kernel works in the directory the peer was started in.
        self.process = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, cwd=cwd
        )
        self.next_id = 0

    def request(self, method: str, params: dict) -> dict:
        self.next_id += 1
        message = {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}
        self.process.stdin.write(json.dumps(message).encode() + b"\n")
        self.process.stdin.flush()
        while True:
            line = self.process.stdout.readline()
            if not line:
                raise RuntimeError(f"the peer closed stdout; its log: {self.log.name}")
            answer = json.loads(line)
            if answer.get("id") == self.next_id and "method" not in answer:
                if "error" in answer:
                    raise RuntimeError(f"{method} failed: {answer['error']}")
                return answer["result"]

    def notify(self, method: str) -> None:
        self.process.stdin.write(json.dumps({"jsonrpc": "2.0", "method": method}).encode() + b"\n")
        self.process.stdin.flush()

    def close(self) -> None:
        self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:  # 2.2.4 does not exit when its stdin closes
            self.process.terminate()
            self.process.wait(timeout=30)
        self.log.close()


class JupyterServer:
    """A Jupyter Server from the peer's venv on 127.0.0.1, with a random token."""

    def __init__(self, venv: Path, root: Path, log: Path):
        root.mkdir(parents=True)
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.token = secrets.token_hex(16)
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log.open("wb")
        self.process = subprocess.Popen(
            [
                str(venv / "bin" / "jupyter-server"),
                "--allow-root",
                "--ServerApp.ip=127.0.0.1",
                f"--ServerApp.port={self.port}",
                "--ServerApp.port_retries=0",
                f"--IdentityProvider.token={self.token}",
                "--ServerApp.open_browser=False",
                f"--ServerApp.root_dir={root}",
            ],
            stdout=self.log,
            stderr=self.log,
            cwd=root,  # the peer's kernels work here
        )
        deadline = time.monotonic() + KERNEL_START_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                request = urllib.request.Request(
                    f"{self.url}/api/status", headers={"Authorization": f"token {self.token}"}
                )
                with urllib.request.urlopen(request, timeout=5):
                    return
            except OSError:
                time.sleep(1)
        self.close()
        raise RuntimeError(f"the Jupyter Server did not start; its log: {log}")

    def close(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()


def pixels(block: dict) -> int:
    data = base64.b64decode(block.get("data") or "")
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        width, height = struct.unpack(">II", data[16:24])
        return width * height
    from PIL import Image  # JPEG

    with Image.open(io.BytesIO(data)) as image:
        return image.width * image.height


def measure(content: list[dict]) -> dict:
    texts = [block["text"] for block in content if block.get("type") == "text"]
    images = [block for block in content if block.get("type") == "image"]
    return {
        "chars": sum(len(text) for text in texts),
        "images": len(images),
        "pixels": sum(pixels(block) for block in images),
        "silent": not texts or texts == ["(no output)"] or texts == ["[No output generated]"],
    }


def run_ours(binary: Path, notebook: Path, client: str, work: Path) -> list[dict]:
    home, cwd = work / "home", work / "cwd"
    home.mkdir(parents=True)
    cwd.mkdir()
    server = McpServer(binary, home, cwd, work / "mcp.log")
    rows = []
    try:
        server.request(
            "initialize",
            {
                "protocolVersion": MCP_PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": {"name": client, "version": "0"},
            },
            KERNEL_START_TIMEOUT_S,
        )
        server.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        server.request("tools/list", {}, KERNEL_START_TIMEOUT_S)
        for _, source in code_cells(nbformat.read(notebook, as_version=4)):
            result = server.request(
                "tools/call", {"name": "execute", "arguments": {"code": source}}, CELL_TIMEOUT_S
            )
            rows.append(measure(result.get("content", [])) | {"result": result})
    finally:
        server.close()
    return rows


def run_peer(venv: Path, server: JupyterServer, notebook: Path, work: Path) -> list[dict]:
    peer = StdioPeer(
        [
            str(venv / "bin" / "jupyter-mcp-server"), "start", "--transport", "stdio",
            "--jupyter-url", server.url, "--jupyter-token", server.token,
        ],
        work.with_suffix(".peer.log"),
        work,
    )
    rows = []
    try:
        peer.request(
            "initialize",
            {
                "protocolVersion": MCP_PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "pi-repl-text-economy", "version": "0"},
            },
        )
        peer.notify("notifications/initialized")
        peer.request("tools/list", {})
        for _, source in code_cells(nbformat.read(notebook, as_version=4)):
            result = peer.request(
                "tools/call", {"name": PEER_TOOL, "arguments": {"code": source}}
            )
            row = measure(result.get("content", [])) | {"result": result}
            structured = result.get("structuredContent")
            row["structured"] = (
                len(json.dumps(structured, separators=(",", ":"), ensure_ascii=False))
                if structured is not None
                else 0
            )
            rows.append(row)
    finally:
        peer.close()
    return rows


def total(rows: list[dict]) -> dict:
    return {
        "cells": len(rows),
        "chars": sum(r["chars"] for r in rows),
        "images": sum(r["images"] for r in rows),
        "pixels": sum(r["pixels"] for r in rows),
        "silent": sum(r["silent"] for r in rows),
        "structured": sum(r.get("structured", 0) for r in rows),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bin", default=os.environ.get("PI_REPL_BIN", "target/debug/pi-repl"))
    parser.add_argument("--baseline-bin", help="another pi-repl binary, e.g. built from main")
    parser.add_argument("--peer-venv", type=Path, help="a venv with jupyter-mcp-server 2.2.4")
    parser.add_argument(
        "--client",
        action="append",
        help="clientInfo name(s) to run ours as (default: claude-code and codex-mcp-client)",
    )
    parser.add_argument("--dump", type=Path, help="write every result here, a file per run")
    parser.add_argument("--only", help="run only the notebooks whose name contains this")
    args = parser.parse_args()
    clients = args.client or ["claude-code", "codex-mcp-client"]
    runs = [(f"pi-repl as {c}", "ours", Path(args.bin), c) for c in clients]
    if args.baseline_bin:
        runs.append(
            ("baseline as claude-code", "ours", Path(args.baseline_bin), "claude-code")
        )
    if args.peer_venv:
        runs.append(("jupyter-mcp-server 2.2.4", "peer", args.peer_venv.resolve(), None))

    results = {name: [] for name, *_ in runs}
    with tempfile.TemporaryDirectory(prefix="pi-repl-text-economy-") as tmp:
        tmp = Path(tmp)
        ipython = tmp / "ipython" / "profile_default" / "startup"
        ipython.mkdir(parents=True)
        (ipython / "00-corpus-seed.py").write_text(SEED_STARTUP)
        write_kernelspec(tmp / "jupyter")
        os.environ.update(
            IPYTHONDIR=str(tmp / "ipython"),
            MPLBACKEND=INLINE_BACKEND,
            PYTHONHASHSEED="0",
            MPLCONFIGDIR=str(tmp / "matplotlib"),
            JUPYTER_PATH=str(tmp / "jupyter"),
            JUPYTER_RUNTIME_DIR=str(tmp / "jupyter-runtime"),
        )
        server = (
            JupyterServer(args.peer_venv.resolve(), tmp / "peer-root", tmp / "jupyter-server.log")
            if args.peer_venv
            else None
        )
        notebooks = [n for n in sorted(CORPUS.glob("*.ipynb")) if args.only in (None, "") or args.only in n.stem]
        try:
            for notebook in notebooks:
                for number, (name, kind, what, client) in enumerate(runs):
                    work = tmp / f"{notebook.stem}-{number}"
                    if kind == "ours":
                        rows = run_ours(what, notebook, client, work)
                    else:
                        work.mkdir(parents=True)
                        rows = run_peer(what, server, notebook, work)
                    results[name] += rows
                    if args.dump:
                        args.dump.mkdir(parents=True, exist_ok=True)
                        slug = name.replace(" ", "-")
                        with (args.dump / f"{notebook.stem}.{slug}.jsonl").open("w") as out:
                            for row in rows:
                                out.write(json.dumps(row["result"]) + "\n")
                    t = total(rows)
                    print(
                        f"{notebook.stem:42} {name:36} {t['cells']:4} cells {t['chars']:7} chars "
                        f"{t['images']:3} images {t['pixels']:9} px",
                        flush=True,
                    )
        finally:
            if server is not None:
                server.close()

    # Ratios to the peer's row when it ran, else to the first row.
    base_name = runs[-1][0] if args.peer_venv else runs[0][0]
    first = total(results[base_name])
    print()
    print(
        "| run | cells | text chars | chars per cell | silent cells | images | pixels "
        f"| text ÷ {base_name} | structuredContent JSON chars |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name, *_ in runs:
        t = total(results[name])
        ratio = t["chars"] / first["chars"] if first["chars"] else float("nan")
        print(
            f"| {name} | {t['cells']} | {t['chars']} | {t['chars'] / max(t['cells'], 1):.1f} | "
            f"{t['silent']} | {t['images']} | {t['pixels']} | {ratio:.2f}× | "
            f"{t['structured'] or '–'} |"
        )


if __name__ == "__main__":
    main()
