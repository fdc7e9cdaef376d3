"""Model economy of a progress bar (issue 29): characters a 10 000-step tqdm loop costs.

Runs `for i in tqdm(range(10_000), mininterval=0): pass` (every update drawn, the worst case)
through `pi-repl mcp` and counts the characters of the result's text (what the model reads)
and of the progress notifications' messages (what a client streams), against the raw text
the loop writes (the same loop in a plain Python process, stderr captured).

    $PI_REPL_TEST_PYTHON benches/progress_economy.py target/debug/pi-repl [baseline-binary]
"""

import json
import subprocess
import sys

CODE = "from tqdm import tqdm\nfor i in tqdm(range(10_000), mininterval=0): pass"


def through(binary: str) -> tuple[int, int, str]:
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
        "name": "execute", "arguments": {"code": CODE}, "_meta": {"progressToken": "b"}}})
    response, streamed = until(2)
    server.stdin.close()
    server.wait(timeout=60)
    text = response["result"]["content"][0]["text"]
    return len(text), streamed, text


def raw() -> int:
    done = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True)
    return len(done.stderr)


if __name__ == "__main__":
    raw_chars = raw()
    print(f"raw stderr of the loop: {raw_chars} characters")
    for binary in sys.argv[1:]:
        chars, streamed, text = through(binary)
        last = text.splitlines()[-1] if text else ""
        print(f"{binary}: result text {chars} characters, progress messages {streamed} "
              f"characters; last line: {last[:90]!r}")
