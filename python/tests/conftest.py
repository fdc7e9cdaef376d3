"""Shared fixtures for the kernel-side module's tests.

A ``Session`` is one snapshot state dir with its key; ``session.open(ns)`` gives a store on it
that has already been through ``restore`` (as the host does), so it may save. Namespaces are plain
dicts shaped like IPython's (``__name__ == "__main__"``), filled by running code in them.
"""

import builtins
import json
import os
import secrets
import signal
import subprocess
import sys
import textwrap

import pytest

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if PYTHON_DIR not in sys.path:
    sys.path.insert(0, PYTHON_DIR)

from pi_repl_kernel import snapshot  # noqa: E402
from pi_repl_kernel.snapshot import reviving as snapshot_restore  # noqa: E402
from pi_repl_kernel.snapshot import saving as snapshot_save  # noqa: E402
from pi_repl_kernel.snapshot.store import Store, make_state_dir  # noqa: E402

GIB = 1 << 30


def pytest_configure(config):
    config.addinivalue_line("markers", "big: moves about 1 GB through memory and disk")
    _take_sigint_back()


def _take_sigint_back():
    """Give this process Python's own SIGINT handler if it started with SIGINT ignored.

    A shell without job control starts a background command (``scripts/test &``) with SIGINT
    ignored, and Python keeps an ignored SIGINT ignored. The tests that interrupt themselves, as
    the host interrupts a kernel, then got no KeyboardInterrupt and failed as if the save or
    ``bash()`` had swallowed it (6 failures, seen running ``scripts/test`` under ``nohup ... &``).
    """
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def new_namespace(code=""):
    """A namespace like IPython's user namespace, with ``code`` already run in it."""
    namespace = {"__name__": "__main__", "__builtins__": builtins}
    if code:
        run(namespace, code)
    return namespace


def run(namespace, code):
    exec(compile(textwrap.dedent(code), "<cell>", "exec"), namespace)
    return namespace


class Session:
    """One session's state dir and key, and helpers to open stores on it."""

    def __init__(self, root):
        self.state_dir = os.path.join(root, "state")
        self.key_file = os.path.join(root, "key")
        self.key = secrets.token_bytes(32)
        with open(self.key_file, "w") as file:
            file.write(self.key.hex())
        os.chmod(self.key_file, 0o600)
        make_state_dir(self.state_dir)

    def store(self, namespace, **options):
        """A store on this session (not yet restored)."""
        caps = {"max_binding_bytes": 4 * GIB, "max_total_bytes": 16 * GIB}
        caps.update({k: v for k, v in options.items() if k.startswith("max_")})
        return Store(self.state_dir, options.get("key", self.key), namespace,
                     protected_names=options.get("protected", ()), **caps)

    def open(self, namespace, **options):
        """A store that went through ``restore`` (as the host does), ready to save."""
        store = self.store(namespace, **options)
        snapshot_restore.restore(store, phase="all")
        return store

    def save(self, store, **options):
        return snapshot_save.save(store, **options)

    def revive(self, phase="all", skip=(), **options):
        """Revive this session into a fresh namespace: ``(namespace, result, store)``."""
        namespace = new_namespace()
        store = self.store(namespace, **options)
        result = snapshot_restore.restore(store, phase=phase, skip=skip)
        return namespace, result, store

    @property
    def manifest_path(self):
        return os.path.join(self.state_dir, "manifest.json")

    def manifest(self):
        with open(self.manifest_path) as file:
            return json.load(file)

    def blob_files(self):
        """Every file under blobs/ (name -> size), temp files included."""
        found = {}
        for directory, _, files in os.walk(os.path.join(self.state_dir, "blobs")):
            for name in files:
                found[name] = os.path.getsize(os.path.join(directory, name))
        return found


@pytest.fixture
def session(tmp_path):
    return Session(str(tmp_path))


def run_child(script, *args, timeout=30):
    """Run ``script`` in a child Python that can import the package; return CompletedProcess."""
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script), *args], env=env,
                          capture_output=True, text=True, timeout=timeout)


CHILD_RESTORE = """
    import builtins, json, sys
    from pi_repl_kernel import snapshot
    namespace = {"__name__": "__main__", "__builtins__": builtins}
    configured = snapshot.configure(sys.argv[1], sys.argv[2], max_binding_bytes=1 << 32,
                                    max_total_bytes=1 << 34, namespace=namespace)
    assert configured == {"ok": True}, configured
    result = snapshot.restore(phase=sys.argv[3] if len(sys.argv) > 3 else "all")
    print(json.dumps(result))
"""
"""A child that revives the session given as argv (state dir, key file, phase) and prints JSON."""


@pytest.fixture
def api(session):
    """The module-level API configured on ``session`` with a dict namespace."""
    namespace = new_namespace()

    def configure(**options):
        arguments = dict(max_binding_bytes=GIB, max_total_bytes=4 * GIB, namespace=namespace)
        arguments.update(options)
        return snapshot.configure(session.state_dir, session.key_file, **arguments)

    api = type("Api", (), {})()
    api.namespace, api.configure, api.session = namespace, configure, session
    yield api
    snapshot._store = None  # the next test starts unconfigured
