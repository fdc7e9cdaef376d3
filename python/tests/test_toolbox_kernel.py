"""The toolbox where it runs: a real ipykernel, started like the host starts it, loads the four
toolbox files with ``helpers.load`` (one cell each) and the functions are called from cells.

The kernel runs ``pi_repl_kernel.launch`` (the same bootstrap as the Rust host) with a lifeline
pipe on fd 0 that this test holds open, in a temporary working directory.
"""

import base64
import contextlib
import json
import os
import signal
import sys
from pathlib import Path

import pytest
from eventually import eventually

PYTHON_DIR = Path(__file__).resolve().parents[1]
TOOLBOX = PYTHON_DIR / "pi_repl_kernel" / "toolbox"
BOOTSTRAP = (  # as src/kernel_module.rs starts the kernel
    "import sys; sys.path.insert(0, sys.argv.pop(1)); "
    "from pi_repl_kernel.launch import main; main()"
)
CELL_TIMEOUT = 30  # seconds; a cell here takes milliseconds, this only bounds a broken run

jupyter_client = pytest.importorskip("jupyter_client")
from jupyter_client.kernelspec import KernelSpecManager  # noqa: E402


@contextlib.contextmanager
def start_kernel(tmp_path_factory):
    """A running kernel: ``(manager, client, cwd, close_lifeline)``; shut down, lifeline closed
    at the end. ``close_lifeline()`` does what the host's exit does to the kernel."""
    root = tmp_path_factory.mktemp("kernel")
    spec_dir = root / "kernels" / "pi-repl-test"
    spec_dir.mkdir(parents=True)
    argv = [sys.executable, "-c", BOOTSTRAP, str(PYTHON_DIR), "-f", "{connection_file}"]
    spec = {"argv": argv, "display_name": "pi-repl test", "language": "python"}
    (spec_dir / "kernel.json").write_text(json.dumps(spec))
    cwd = root / "work"
    cwd.mkdir()
    manager = jupyter_client.KernelManager(
        kernel_name="pi-repl-test",
        kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(root / "kernels")]),
    )
    lifeline_read, lifeline_write = os.pipe()
    manager.start_kernel(cwd=str(cwd), stdin=lifeline_read)
    os.close(lifeline_read)
    lifeline = [lifeline_write]

    def close_lifeline():
        if lifeline:
            os.close(lifeline.pop())

    client = manager.client()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=60)
        yield manager, client, cwd, close_lifeline
    finally:
        client.stop_channels()
        if manager.is_alive():
            manager.shutdown_kernel(now=True)
        else:
            # A kernel the test ended: the manager's control socket and zmq context are still
            # open. Left to the garbage collector they can hang pytest at exit: a context
            # finalized while a socket of the same garbage cycle is still open blocks in
            # zmq_ctx_term for ever (its weak list of sockets was cleared first).
            manager.cleanup_resources()
        close_lifeline()


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    with start_kernel(tmp_path_factory) as running:
        yield running[:3]


def run(client, code, displays=None):
    """Execute one cell; return ``(stdout, result text or None, error dict or None)``; the
    display_data bundles are appended to ``displays`` when given."""
    stdout, result, error = [], [None], [None]

    def on_message(message):
        kind, content = message["msg_type"], message["content"]
        if kind == "stream" and content["name"] == "stdout":
            stdout.append(content["text"])
        elif kind == "execute_result":
            result[0] = content["data"]["text/plain"]
        elif kind == "error":
            error[0] = content
        elif kind == "display_data" and displays is not None:
            displays.append(content["data"])

    # stop_on_error=False: a cell sent right after an interrupted one is run, not aborted by
    # ipykernel's queue abort (the host does not rely on that abort either).
    client.execute_interactive(
        code, store_history=False, stop_on_error=False, output_hook=on_message,
        timeout=CELL_TIMEOUT,
    )
    return "".join(stdout), result[0], error[0]


def load_toolbox(client):
    records = {}
    for name in ("read", "write", "edit", "bash"):
        # The host's way: one cell per helper, binding nothing of its own in the namespace.
        code = (
            "print(__import__('json').dumps(__import__('pi_repl_kernel.helpers', fromlist=['load'])"
            f".load({str(TOOLBOX / (name + '.py'))!r})))"
        )
        stdout, _, error = run(client, code)
        assert error is None, error
        records[name] = json.loads(stdout)
    return records


def test_the_toolbox_loads_in_a_real_kernel_and_works_from_cells(kernel):
    _, client, cwd = kernel
    records = load_toolbox(client)
    assert {name: record["error"] for name, record in records.items()} == dict.fromkeys(records)
    assert records["bash"]["functions"][0]["signature"] == (
        "(command, timeout=None, cwd=None, echo=True)"
    )

    stdout, result, error = run(client, "bash('echo hi').stdout")
    assert error is None and result == "'hi\\n'" and stdout == "hi\n"  # echoed to the cell
    # Relative paths resolve against the kernel's working directory.
    _, result, error = run(client, "write('notes/a.txt', 'one\\ntwo\\n')")
    assert error is None
    assert result == f"Created {cwd}/notes/a.txt (2 lines, 8 bytes; made directory {cwd}/notes)."
    _, result, error = run(client, "edit('notes/a.txt', 'two', 'three')")
    assert error is None and "-two\n+three" in result  # displayed as text, not as a quoted repr
    _, result, _ = run(client, "read('notes/a.txt')")
    assert result == "     1\tone\n     2\tthree"
    assert (cwd / "notes" / "a.txt").read_text() == "one\nthree\n"

    # Only the four functions reached the namespace: no helper import, no loader.
    names = ("read", "write", "edit", "bash", "os", "subprocess", "helpers", "pi_repl_kernel")
    _, result, _ = run(client, f"sorted(k for k in {names} if k in globals())")
    assert result == "['bash', 'edit', 'read', 'write']"
    # They are the workspace's tools, not the user's variables: %who lists neither, until one
    # is redefined by the user.
    stdout, _, _ = run(client, "mine = 1\n%who")
    assert stdout.split() == ["mine"]
    stdout, _, _ = run(client, "def read(path): return path\n%who")
    assert sorted(stdout.split()) == ["mine", "read"]
    run(client, "del mine")
    load_toolbox(client)
    _, result, _ = run(client, "help(read)")
    assert result is None
    stdout, _, _ = run(client, "help(read)")
    assert "offset" in stdout and "FileNotFoundError" in stdout

    # A toolbox error is an ordinary exception in the cell; the kernel carries on.
    _, _, error = run(client, "read('nowhere.txt')")
    assert error["ename"] == "FileNotFoundError" and "No such file" in error["evalue"]


def test_interrupting_a_cell_running_bash_leaves_no_process_behind(kernel, tmp_path):
    manager, client, _ = kernel
    load_toolbox(client)
    pidfile = tmp_path / "sh.pid"
    cell = f"bash(\"sh -c 'echo $$ > {pidfile}; sleep 30'\")"
    message_id = client.execute(cell, store_history=False)
    eventually(lambda: pidfile.exists() and pidfile.read_text().strip(), "the command started",
               CELL_TIMEOUT)
    shell = int(pidfile.read_text())
    group = int(Path(f"/proc/{shell}/stat").read_text().rpartition(")")[2].split()[2])
    members = [pid for pid in _pids() if _group_of(pid) == group]
    assert shell in members

    manager.interrupt_kernel()  # SIGINT to the kernel's process group, as the host does
    reply = client.get_shell_msg(timeout=CELL_TIMEOUT)
    while reply["parent_header"].get("msg_id") != message_id:
        reply = client.get_shell_msg(timeout=CELL_TIMEOUT)
    assert reply["content"]["status"] == "error"
    assert reply["content"]["ename"] == "KeyboardInterrupt"
    assert [pid for pid in members if _running(pid)] == []
    assert [pid for pid in _pids() if _group_of(pid) == group and _running(pid)] == []
    _, result, error = run(client, "bash('echo still here', echo=False).stdout")
    assert error is None and result == "'still here\\n'"


def test_read_shows_an_image_through_the_display_path_like_a_plot(kernel):
    _, client, cwd = kernel
    load_toolbox(client)
    png = bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
        "1f15c4890000000d49444154789c6300010000050001"
        "0d0a2db40000000049454e44ae426082"
    )
    (cwd / "dot.png").write_bytes(png)
    displays = []
    _, result, error = run(client, "read('dot.png')", displays)
    assert error is None
    assert result == f"Read image file {cwd}/dot.png [image/png, 67 bytes, 1x1]: shown as an image."
    assert [base64.b64decode(bundle["image/png"]) for bundle in displays] == [png]


@pytest.mark.parametrize("how", ["kernel SIGKILL", "host gone"])
def test_a_bash_command_ends_when_its_kernel_or_host_dies(tmp_path_factory, tmp_path, how):
    """The kernel dies by SIGKILL (no cleanup of its own runs), or the host goes away (its
    lifeline closes and the kernel ends its own process group): either way the reaper ends the
    command's process group, its children and a background job it left behind included."""
    with start_kernel(tmp_path_factory) as (manager, client, _, close_lifeline):
        load_toolbox(client)
        pidfile, bgfile = tmp_path / "sh.pid", tmp_path / "bg.pid"
        _, _, error = run(
            client, f"bash('sleep 300 > /dev/null 2>&1 & echo $! > {bgfile}', echo=False)"
        )
        assert error is None
        background = int(bgfile.read_text())
        client.execute(f"bash(\"sh -c 'echo $$ > {pidfile}; sleep 300'\")", store_history=False)
        eventually(lambda: pidfile.exists() and pidfile.read_text().strip(),
                   "the command started", CELL_TIMEOUT)
        shell = int(pidfile.read_text())
        group = _group_of(shell)
        assert _running(shell) and _running(background)
        if how == "kernel SIGKILL":
            os.kill(manager.provisioner.process.pid, signal.SIGKILL)
        else:
            close_lifeline()
        eventually(lambda: not (_running(shell) or _running(background)),
                   f"the command ended with its kernel ({how})", CELL_TIMEOUT)
        assert [pid for pid in _pids() if _group_of(pid) == group and _running(pid)] == []


def _pids():
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def _stat(pid):
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except (FileNotFoundError, ProcessLookupError):
        return None


def _group_of(pid):
    fields = _stat(pid)
    return int(fields[2]) if fields else None


def _running(pid):
    fields = _stat(pid)
    return fields is not None and fields[0] not in ("Z", "X")  # a zombie has already ended
