"""A live fork (``live_fork``) in a real kernel started as the host starts it: the copy is a
kernel of its own that a second Jupyter client drives, with the parent's namespace as it was at
the fork, its own output, interrupts and lifeline; the parent is untouched."""

import errno
import os
import queue
import signal

import pytest
from eventually import eventually
from test_toolbox_kernel import run, start_kernel

jupyter_client = pytest.importorskip("jupyter_client")


@pytest.fixture()
def kernel(tmp_path_factory):
    with start_kernel(tmp_path_factory) as running:
        yield running[1]


def fork(client, before=""):
    """Fork the kernel from a cell; return ``(runtime dir, pid)``."""
    stdout, _, error = run(client, before + (
        "from pi_repl_kernel import live_fork\n"
        "prepared = live_fork.prepare()\n"
        "copy = live_fork.fork_into(prepared)\n"
        "print(prepared.directory, copy)"))
    assert error is None, error
    directory, pid = stdout.split()
    return directory, int(pid)


def adopt(directory):
    """What the child's host does: open the lifeline, connect a client."""
    lifeline = eventually(lambda: _open_lifeline(directory), "the copy opened its lifeline")
    os.write(lifeline, b"a")
    client = jupyter_client.BlockingKernelClient(
        connection_file=os.path.join(directory, "connection.json"))
    client.load_connection_file()
    client.start_channels()
    client.wait_for_ready(timeout=60)
    return lifeline, client


def _open_lifeline(directory):
    """The lifeline's write end, or None while the copy has not opened its end (ENXIO)."""
    try:
        return os.open(os.path.join(directory, "lifeline"), os.O_WRONLY | os.O_NONBLOCK)
    except OSError as error:
        if error.errno == errno.ENXIO:
            return None
        raise


def ended(pid):
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_the_copy_has_the_state_at_the_fork_and_its_own_channels(kernel):
    run(kernel, "from pi_repl_kernel import host_requests\nhost_requests._lock.acquire()\n"
                "data = {'rows': list(range(1000))}\nimport threading\n"
                "held = threading.Lock()\nheld.acquire()\n"
                "worker = threading.Thread(target=held.acquire, name='waiter', daemon=True)\n"
                "worker.start()")
    directory, pid = fork(kernel, "data['same cell'] = True\n")
    lifeline, copy = adopt(directory)
    try:
        stdout, result, error = run(copy, "data['copy'] = 1\nprint(sorted(data)[-2:])\n"
                                          "len(data['rows']), worker.is_alive(), "
                                          "host_requests._lock.locked()")
        assert error is None, error
        # The value of the last expression arrives (the parent's cell's traps were reset).
        assert stdout == "['same cell', 'rows']\n" or stdout == "['rows', 'same cell']\n"
        assert result == "(1000, False, False)", (
            "the copy has no thread but the forking one, and the stdin channel's lock held by "
            "the parent is free in the copy")
        # The copy is an orphan (parent pid 1): it outlives ipykernel's parent poll (once a
        # second), which would take that as the host gone. The sleep is the workload.
        _, result, error = run(copy, "import time\ntime.sleep(1.5)\n'alive'")
        assert error is None and result == "'alive'", error
        stdout, result, _ = run(kernel, "print('copy' in data)\nworker.is_alive()")
        assert stdout == "False\n" and result == "True", "the parent keeps its own state"
        # A SIGINT to the copy interrupts the copy's cell, not the parent.
        copy.execute("import time\nprint('started', flush=True)\ntime.sleep(60)")
        eventually(lambda: _saw_stream(copy, "started"), "the copy's cell started")
        os.kill(pid, signal.SIGINT)
        reply = copy.get_shell_msg(timeout=30)
        assert reply["content"]["ename"] == "KeyboardInterrupt", reply["content"]
        _, result, error = run(kernel, "6 * 7")
        assert error is None and result == "42"
    finally:
        copy.stop_channels()
        os.close(lifeline)
    eventually(lambda: ended(pid), "the copy ended when its host's end of the lifeline closed")
    assert not os.path.exists(directory), "the copy removed its runtime directory"


def test_a_copy_no_host_adopts_ends_by_itself(kernel):
    directory, pid = fork(kernel, "from pi_repl_kernel import live_fork\n"
                                  "live_fork.ADOPT_LIMIT_S = 1\n")
    eventually(lambda: ended(pid), "the unadopted copy ended")
    _, result, _ = run(kernel, "1 + 1")
    assert result == "2"
    assert not os.path.exists(directory), "the copy removed its runtime directory"


def _saw_stream(client, text):
    """True once an IOPub stream message carrying ``text`` was read (False: not yet)."""
    while True:
        try:
            message = client.get_iopub_msg(timeout=0.2)
        except queue.Empty:
            return False
        if message["msg_type"] == "stream" and text in message["content"]["text"]:
            return True


def test_the_copy_takes_its_hosts_variables_except_those_a_cell_changed(kernel):
    run(kernel, "import os\nos.environ['SET_BY_A_CELL'] = 'cell'\n"
                "os.environ['PI_REPL_KERNEL_TAG'] = os.environ.get('PI_REPL_KERNEL_TAG', '')")
    directory, pid = fork(kernel)
    lifeline, copy = adopt(directory)
    try:
        stdout, _, error = run(copy, (
            "from pi_repl_kernel import live_fork, launch\n"
            "base = dict(launch.initial_environment)\n"
            "new = dict(base, PI_REPL_HOST_ID='child-host', SET_BY_A_CELL='host')\n"
            "new.pop('HOME', None)\n"
            "print(live_fork.take_environment(new)['changed'])\n"
            "print(os.environ['PI_REPL_HOST_ID'], os.environ['SET_BY_A_CELL'], "
            "'HOME' in os.environ)"))
        assert error is None, error
        changed, values = stdout.splitlines()
        assert "PI_REPL_HOST_ID" in changed and "HOME" in changed, changed
        assert "SET_BY_A_CELL" not in changed, changed
        assert values == "child-host cell False", values
        _, result, _ = run(kernel, "os.environ.get('PI_REPL_HOST_ID') != 'child-host'")
        assert result == "True", "the parent's environment is its own"
    finally:
        copy.stop_channels()
        os.close(lifeline)
