"""A scripted Jupyter kernel, for testing pi-repl's engine (its runner) against kernel behaviour a
real ipykernel cannot be made to show on demand: a kernel that never answers, dies in the middle
of a cell or right after one, loses a reply, or ignores an interrupt.

It speaks the real wire protocol (ZMQ over the IPC sockets of the connection file pi-repl wrote,
HMAC-signed messages, the status/execute_input/execute_reply sequence), so the engine drives it
exactly as it drives ipykernel; only the *behaviour* is scripted. It names its language
``scripted``, so the engine loads no kernel-side module into it (an ephemeral workspace).

Usage (pi-repl launches ``<python> -c BOOTSTRAP <module_dir> -f <connection file>``; the test's
``python`` is a wrapper that runs this file first):

    python kernel.py <script.json> [anything ...] -f <connection file>

The script (JSON):

    {"log": "<file>",             # every execute_request's code is appended here, one JSON line
     "kernel_info": "answer",     # or "never": the kernel never gets ready
     "rules": [{"code": "<substring>", "do": [<action>, ...]}, ...]}

The first rule whose ``code`` occurs in the cell's code applies; otherwise the cell prints
nothing and succeeds. Actions, in order:

    {"print": "text"}              stream to stdout
    {"result": "text"}             an execute_result (text/plain)
    {"error": ["Name", "value"]}   the cell fails with that exception
    {"exit": 3}                    the process exits now (no reply)
    {"exit_when": "<file>", "status": 3}
                                   the cell succeeds; the process exits (idle, between cells)
                                   once the test creates that file
    {"hang": true}                 wait until SIGINT, then fail with KeyboardInterrupt
    {"hang_forever": true}         wait, ignoring SIGINT (a wedged kernel)
    {"no_reply": true}             busy and idle status go out, but never an execute_reply

The process also exits when its stdin closes (pi-repl's lifeline), so it never outlives a test.
"""

import hashlib
import hmac
import json
import os
import signal
import sys
import threading
import time
import uuid
from datetime import datetime, UTC

import zmq

DELIMITER = b"<IDS|MSG>"


class Kernel:
    def __init__(self, script, connection):
        self.script = script
        self.key = connection["key"].encode()
        self.session = uuid.uuid4().hex
        self.count = 0
        self.interrupted = threading.Event()
        context = zmq.Context()

        def bind(kind, port_name):
            socket = context.socket(kind)
            socket.bind(f"ipc://{connection['ip']}-{connection[port_name]}")
            return socket

        self.shell = bind(zmq.ROUTER, "shell_port")
        self.control = bind(zmq.ROUTER, "control_port")
        self.stdin = bind(zmq.ROUTER, "stdin_port")
        self.iopub = bind(zmq.PUB, "iopub_port")
        self.heartbeat = bind(zmq.REP, "hb_port")

    # -- the wire protocol -------------------------------------------------------------------

    def sign(self, parts):
        mac = hmac.new(self.key, digestmod=hashlib.sha256)
        for part in parts:
            mac.update(part)
        return mac.hexdigest().encode()

    def receive(self, socket):
        frames = socket.recv_multipart()
        split = frames.index(DELIMITER)
        identities, rest = frames[:split], frames[split + 1:]
        signature, parts = rest[0], rest[1:5]
        if not hmac.compare_digest(signature, self.sign(parts)):
            raise SystemExit("scripted kernel: a message with a bad signature")
        header, parent, metadata, content = (json.loads(part) for part in parts)
        return identities, {"header": header, "parent_header": parent,
                            "metadata": metadata, "content": content}

    def send(self, socket, msg_type, content, parent, identities=()):
        header = {
            "msg_id": uuid.uuid4().hex,
            "msg_type": msg_type,
            "session": self.session,
            "username": "scripted",
            "date": datetime.now(UTC).isoformat(),
            "version": "5.3",
        }
        parts = [json.dumps(part).encode() for part in
                 (header, parent.get("header", {}) if parent else {}, {}, content)]
        socket.send_multipart([*identities, DELIMITER, self.sign(parts), *parts])

    def status(self, state, parent):
        self.send(self.iopub, "status", {"execution_state": state}, parent)

    # -- behaviour ---------------------------------------------------------------------------

    def serve(self):
        poller = zmq.Poller()
        for socket in (self.shell, self.control, self.heartbeat):
            poller.register(socket, zmq.POLLIN)
        while True:
            for socket, _ in poller.poll():
                if socket is self.heartbeat:
                    self.heartbeat.send(self.heartbeat.recv())
                    continue
                identities, message = self.receive(socket)
                self.handle(socket, identities, message)

    def handle(self, socket, identities, message):
        msg_type = message["header"]["msg_type"]
        reply_type = msg_type.replace("_request", "_reply")
        if msg_type == "kernel_info_request":
            if self.script.get("kernel_info", "answer") == "never":
                return
            self.status("busy", message)
            self.send(socket, reply_type, {
                "status": "ok", "protocol_version": "5.3", "implementation": "scripted",
                "implementation_version": "1", "banner": "scripted kernel",
                "language_info": {"name": "scripted", "version": "1",
                                  "mimetype": "text/plain", "file_extension": ".txt"},
            }, message, identities)
            self.status("idle", message)
        elif msg_type == "execute_request":
            self.execute(socket, identities, message)
        elif msg_type == "shutdown_request":
            self.send(socket, reply_type, {"status": "ok", "restart": False}, message, identities)
            os._exit(0)
        else:
            self.send(socket, reply_type, {"status": "ok"}, message, identities)

    def execute(self, socket, identities, message):
        code = message["content"]["code"]
        silent = message["content"].get("silent", False)
        with open(self.script["log"], "a") as log:
            log.write(json.dumps(code) + "\n")
        if not silent:
            self.count += 1
        self.status("busy", message)
        self.send(self.iopub, "execute_input",
                  {"code": code, "execution_count": self.count}, message)
        actions = next((rule["do"] for rule in self.script.get("rules", [])
                        if rule["code"] in code), [])
        failure = None
        for action in actions:
            if "print" in action:
                self.send(self.iopub, "stream", {"name": "stdout", "text": action["print"]},
                          message)
            elif "result" in action:
                self.send(self.iopub, "execute_result", {
                    "execution_count": self.count, "data": {"text/plain": action["result"]},
                    "metadata": {}}, message)
            elif "error" in action:
                failure = action["error"]
            elif "exit" in action:
                os._exit(action["exit"])
            elif "exit_when" in action:
                threading.Thread(target=exit_when, args=(action["exit_when"], action["status"]),
                                 daemon=True).start()
            elif "hang" in action:
                self.interrupted.clear()
                while not self.interrupted.wait(0.05):
                    pass
                failure = ["KeyboardInterrupt", ""]
            elif "hang_forever" in action:
                signal.signal(signal.SIGINT, signal.SIG_IGN)
                while True:
                    time.sleep(3600)
            elif "no_reply" in action:
                self.status("idle", message)
                return
        if failure:
            ename, evalue = failure
            self.send(self.iopub, "error",
                      {"ename": ename, "evalue": evalue, "traceback": [f"{ename}: {evalue}"]},
                      message)
            content = {"status": "error", "ename": ename, "evalue": evalue,
                       "traceback": [f"{ename}: {evalue}"], "execution_count": self.count}
        else:
            content = {"status": "ok", "execution_count": self.count,
                       "user_expressions": {}, "payload": []}
        self.send(socket, "execute_reply", content, message, identities)
        self.status("idle", message)


def exit_when(path, status):
    while not os.path.exists(path):
        time.sleep(0.02)
    os._exit(status)


def main():
    script = json.load(open(sys.argv[1]))
    connection_file = sys.argv[sys.argv.index("-f") + 1]
    connection = json.load(open(connection_file))
    kernel = Kernel(script, connection)
    signal.signal(signal.SIGINT, lambda *_: kernel.interrupted.set())

    def lifeline():
        sys.stdin.buffer.read()
        os._exit(0)

    threading.Thread(target=lifeline, daemon=True).start()
    kernel.serve()


if __name__ == "__main__":
    main()
