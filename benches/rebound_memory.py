"""Kernel memory after a cell rebuilds a big value (a durable session over MCP).

A cell binds a 1 GiB bytearray (a type without weak references, which the snapshot store holds
strongly), the next cell rebuilds it, and the cells after report the kernel's resident size
(VmRSS, read by the kernel itself). Until the store lets go of the old value the kernel holds
both. Runs each binary given (a build of the commit before a change as the second, as the
baseline in the same run) in a session of its own.

    "$PI_REPL_TEST_PYTHON" benches/rebound_memory.py target/debug/pi-repl [baseline-binary]
"""

import json
import os
import subprocess
import sys
import tempfile

GIB = 1 << 30
RSS = ("int(next(l for l in open('/proc/self/status') if l.startswith('VmRSS'))"
       ".split()[1]) // 1024")
CELLS = [
    ("binds 1 GiB", f"data = bytearray(b'x') * {GIB}\n{RSS}"),
    ("rebuilds it (measured inside that cell)", f"data = bytearray(b'y') * {GIB}\n{RSS}"),
    ("the next cell", RSS),
    ("the cell after", RSS),
]


def through(binary):
    home = tempfile.mkdtemp()
    server = subprocess.Popen(
        [binary, "mcp", "--session", "rebound", "--python", sys.executable],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env=dict(os.environ, PI_REPL_HOME=home))
    sent = [0]

    def call(method, params):
        sent[0] += 1
        server.stdin.write(json.dumps(
            {"jsonrpc": "2.0", "id": sent[0], "method": method, "params": params}) + "\n")
        server.stdin.flush()
        while True:
            message = json.loads(server.stdout.readline())
            if message.get("id") == sent[0]:
                return message

    call("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                        "clientInfo": {"name": "bench", "version": "0"}})
    sizes = []
    for _, code in CELLS:
        result = call("tools/call", {"name": "execute", "arguments": {"code": code}})["result"]
        sizes.append(int(result["content"][0]["text"]))
    server.stdin.close()
    server.wait(timeout=120)
    return sizes


if __name__ == "__main__":
    runs = [(binary, through(binary)) for binary in sys.argv[1:]]
    for at, (what, _) in enumerate(CELLS):
        row = " | ".join(f"{sizes[at]} MiB" for _, sizes in runs)
        ratio = ""
        if len(runs) == 2:
            ratio = f" | {runs[0][1][at] / runs[1][1][at]:.2f}x"
        print(f"kernel VmRSS, {what}: {row}{ratio}")
    print("binaries: " + " | ".join(binary for binary, _ in runs))
