"""Live output over MCP (issues 29 and 24): what a cell's streamed output costs.

Runs, through `pi-repl mcp` with a progress token (a client that streams):
- `for i in tqdm(range(10_000), mininterval=0): pass` (every update drawn, the worst case),
  against the raw text the loop writes (the same loop in a plain Python process, stderr
  captured);
- a cell printing 200 000 lines (far over the channel's cap).
For each: the characters of the result's text (what the model reads) and of the progress
notifications' messages (what a client streams), the call's wall time, and the server's peak
resident memory (VmHWM, read before it exits). With a second binary (a build of the commit
before a change) every row runs against it too, in the same run, with the ratios.

    $PI_REPL_TEST_PYTHON benches/progress_economy.py target/release/pi-repl [baseline-binary]
"""

import json
import subprocess
import sys
import time

CODE = "from tqdm import tqdm\nfor i in tqdm(range(10_000), mininterval=0): pass"
WORKLOADS = {
    "tqdm, 10 000 updates": CODE,
    "200 000 lines": "for i in range(200_000):\n    print(f'line {i}')",
}


def peak_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def through(binary: str, code: str = CODE) -> tuple[int, int, str, float, int]:
    server = subprocess.Popen(
        [binary, "mcp", "--python", sys.executable],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )

    def send(message):
        server.stdin.write(json.dumps(message) + "\n")
        server.stdin.flush()

    def until(id_):
        streamed = 0
        while True:
            message = json.loads(server.stdout.readline())
            if message.get("method") == "notifications/progress":
                streamed += len(message["params"].get("message", ""))
            if message.get("id") == id_:
                return message, streamed

    send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "bench", "version": "0"}}})
    until(1)
    send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "execute", "arguments": {"code": "1"}}})
    until(2)
    start = time.perf_counter()
    send({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
        "name": "execute", "arguments": {"code": code}, "_meta": {"progressToken": "b"}}})
    response, streamed = until(3)
    seconds = time.perf_counter() - start
    peak = peak_kb(server.pid)
    server.stdin.close()
    server.wait(timeout=60)
    text = response["result"]["content"][0]["text"]
    return len(text), streamed, text, seconds, peak


def raw() -> int:
    done = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True)
    return len(done.stderr)


if __name__ == "__main__":
    raw_chars = raw()
    print(f"raw stderr of the tqdm loop: {raw_chars} characters")
    for name, code in WORKLOADS.items():
        rows = []
        for binary in sys.argv[1:]:
            chars, streamed, text, seconds, peak = through(binary, code)
            rows.append((streamed, seconds, peak))
            last = text.splitlines()[-1] if text else ""
            print(f"{name} | {binary}: result text {chars} characters, progress messages "
                  f"{streamed} characters, call {seconds * 1000:.0f} ms, server peak "
                  f"{peak / 1024:.1f} MiB; last line: {last[:60]!r}")
        if len(rows) == 2:
            (s_new, t_new, p_new), (s_old, t_old, p_old) = rows
            print(f"{name} | ratios (this build / the other): progress characters "
                  f"{s_new / max(s_old, 1):.2f}x, call time {t_new / t_old:.2f}x, "
                  f"server peak {p_new / max(p_old, 1):.2f}x")
