"""The store inside a real ipykernel, driven the way the host drives it: silent cells that call
``pi_repl_kernel.snapshot`` without binding a name, user cells in between, a SIGINT to preempt.

Covers what a dict namespace cannot: the default namespace (``get_ipython().user_ns``),
IPython's own names left out, the NameError hook for a pending name, and preemption by a real
kernel interrupt.
"""

import json
import os
import time

import pytest

from conftest import PYTHON_DIR
from eventually import eventually

jupyter_client = pytest.importorskip("jupyter_client")

API = '__import__("pi_repl_kernel.snapshot", fromlist=["save"])'


class Kernel:
    """One ipykernel (IPC transport) and a client that runs cells and collects their output."""

    def __init__(self, cwd):
        self.manager = jupyter_client.KernelManager(transport="ipc")
        self.manager.connection_file = os.path.join(cwd, f"kernel-{time.monotonic_ns()}.json")
        env = dict(os.environ, PYTHONPATH=PYTHON_DIR)
        self.manager.start_kernel(env=env, cwd=cwd)
        self.client = self.manager.client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=60)

    def run(self, code, timeout=60, after_send=None):
        """Run a cell; return ``(stdout, error)`` where error is ``(ename, evalue)`` or None."""
        msg_id = self.client.execute(code, store_history=False)
        if after_send is not None:
            after_send()
        stdout, error = [], None
        deadline = time.monotonic() + timeout
        while True:
            message = self.client.get_iopub_msg(timeout=max(0.1, deadline - time.monotonic()))
            if message["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = message["msg_type"], message["content"]
            if kind == "stream" and content["name"] == "stdout":
                stdout.append(content["text"])
            elif kind == "error":
                error = (content["ename"], content["evalue"])
            elif kind == "status" and content["execution_state"] == "idle":
                return "".join(stdout), error

    def call(self, expression, **options):
        """Evaluate an API call in a silent cell and return its JSON result."""
        stdout, error = self.run(f'print(__import__("json").dumps({API}.{expression}))',
                                 **options)
        assert error is None, error
        return json.loads(stdout)

    def stop(self):
        self.client.stop_channels()
        self.manager.shutdown_kernel(now=True)


@pytest.fixture
def kernels(session, tmp_path):
    started = []

    def start():
        kernel = Kernel(str(tmp_path))
        started.append(kernel)
        configured = kernel.call(
            f"configure({session.state_dir!r}, {session.key_file!r}, max_binding_bytes=1 << 30, "
            "max_total_bytes=1 << 32, protected_names=['helper'])")
        assert configured == {"ok": True}
        return kernel

    yield start
    for kernel in started:
        kernel.stop()


def test_a_kernel_namespace_saves_revives_and_names_a_pending_binding(session, kernels):
    first = kernels()
    assert first.call('restore(phase="eager")')["status"] == "none"
    _, error = first.run("""
X = 1
def read_x():
    return X
import numpy as np
big = list(range(400_000))
helper = lambda: "tool"
print("shown")
""")
    assert error is None
    saved = first.call("save()")
    assert saved["committed"], saved
    assert sorted(session.manifest()["bindings"]) == ["X", "big", "np", "read_x"]
    first.stop()

    second = kernels()
    eager = second.call('restore(phase="eager")')
    assert eager["pending"] == ["big"] and sorted(eager["revived"]) == ["X", "np", "read_x"]
    assert second.call("status()")["name_error_hook"] is True
    _, error = second.run("len(big)")
    assert error == ("NameError", "name 'big' was still being revived in the background; it is "
                                  "loaded now \u2014 run the cell again.")
    stdout, error = second.run("print(len(big))")
    assert error is None and stdout == "400000\n"
    assert second.call("status()")["name_error_hook"] is False  # nothing pending any more
    _, error = second.run("undefined_name")
    assert error == ("NameError", "name 'undefined_name' is not defined")
    stdout, _ = second.run("X = 5\nprint(read_x())")
    assert stdout == "5\n"


def test_a_kernel_interrupt_preempts_a_save_and_the_next_save_works(session, kernels, tmp_path):
    kernel = kernels()
    reducing = tmp_path / "reducing"
    kernel.call('restore(phase="all")')
    kernel.run("kept = 'committed'")
    assert kernel.call("save()")["committed"]
    before = session.manifest()
    # Each Slow takes 50 ms to pickle (the workload: 10 s for all 200) and says the save has
    # reached it; the interrupt is sent once it has, so it lands inside that save.
    _, error = kernel.run(f"""
import time
class Slow:
    def __reduce__(self):
        open({str(reducing)!r}, "a").close()
        time.sleep(0.05)
        return (int, (1,))
slow = [Slow() for _ in range(200)]
kept = 'changed'
""")
    assert error is None
    _, error = kernel.run(f"{API}.save()", after_send=lambda: (
        eventually(reducing.exists, "the save reached the slow binding"),
        kernel.manager.interrupt_kernel()))
    assert error is not None and error[0] == "KeyboardInterrupt"
    assert session.manifest() == before
    kernel.run("del slow")
    saved = kernel.call("save()")
    assert saved["committed"] and saved["written"] == ["Slow", "kept", "time"]


def _run_seeing_every_stream(kernel, code):
    """Run a cell; return its stdout and the text of every stream message seen meanwhile (from
    any parent: output leaking from elsewhere would show here)."""
    msg_id = kernel.client.execute(code, store_history=False)
    stdout, streams = [], []
    while True:
        message = kernel.client.get_iopub_msg(timeout=60)
        kind, content = message["msg_type"], message["content"]
        if kind == "stream":
            streams.append(content["text"])
        if message["parent_header"].get("msg_id") != msg_id:
            continue
        if kind == "stream" and content["name"] == "stdout":
            stdout.append(content["text"])
        elif kind == "error":
            raise AssertionError(content["evalue"])
        elif kind == "status" and content["execution_state"] == "idle":
            return "".join(stdout), streams


def test_a_background_save_forks_prints_nothing_and_the_kernel_keeps_running(session, kernels):
    kernel = kernels()
    kernel.call('restore(phase="all")')
    _, error = kernel.run("""
import os, threading
class Loud:
    def __reduce__(self):
        print("LOUD FROM THE CHILD")
        os.write(1, b"FD1 FROM THE CHILD")
        os.write(2, b"FD2 FROM THE CHILD")
        return (str, ("loud",))
loud = Loud()
busy = threading.Thread(target=lambda: [print("thread", i) for i in range(3)])
busy.start(); busy.join()
kept = list(range(100_000))
""")
    assert error is None
    started = kernel.call("save(background=True)")
    assert started["started"] and isinstance(started["pid"], int)
    seen = []
    while True:  # each poll is a cell: the kernel answers while the child saves
        stdout, streams = _run_seeing_every_stream(
            kernel, f'print(__import__("json").dumps({API}.save_status()))')
        seen.extend(streams)
        status = json.loads(stdout)
        if not status["running"]:
            break
    assert status["finished"]["committed"], status
    assert "loud" in status["finished"]["written"] and "kept" in status["finished"]["written"]
    assert not any("FROM THE CHILD" in text for text in seen), seen
    stdout, _ = kernel.run("print(len(kept))")
    assert stdout == "100000\n"
    assert sorted(session.manifest()["bindings"]) == ["Loud", "kept", "loud", "os", "threading"]
