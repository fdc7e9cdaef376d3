"""Set up pi-repl in an ipykernel that pi-repl did not launch (a kernel on a Jupyter Server).

The host cannot install anything on the kernel's machine or choose how the kernel starts. Its
first silent cell writes this package's files (sent in the cell itself) to a private directory
named after their version, puts it on ``sys.path`` and calls ``attach``, which applies what
``launch.main`` applies before a local kernel starts, as far as a running kernel allows:

Helper files of the host's (a project's ``.pi/helpers/``) arrive the same way, one host call
each (``put_helper``), and are loaded from the copy.

- ``input()``/``getpass()`` fail at once with an explanation; stream output is flushed in
  bounded chunks; a ``UsageError`` is the cell's error; thread output is labelled with its cell;
  the in-memory history is trimmed; tracebacks are plain text; the kernel's interpreter is first
  on its ``PATH`` (``environment``) and ``%pip install`` uses uv when it can (``packages``).

What cannot be applied to a running kernel (and ``attach`` reports as such): the lifeline (the
kernel's life is the server's business), the process group and the tag that let the host end
what a cell started, the history database being off, the IOPub pipe over IPC, ``faulthandler``
output to the host.

A copy of the package from another pi-repl version already imported in the kernel (an attached
kernel used by an older host) is dropped from ``sys.modules`` first, so the versions never mix.
"""

import os
import sys

UNAVAILABLE = (
    "lifeline",
    "process group and tag (ending the processes a cell started)",
    "kernel stderr and crash reports",
    "out-of-memory detection",
)
"""What a remote kernel does without (told to the host, which tells the user)."""

_attached = []

_module_dir = None


def attach(version, module_dir):
    """Patch the running kernel once; return what the host checks (version, where, who)."""
    global _module_dir
    import pi_repl_kernel

    pi_repl_kernel.__pi_repl_version__ = version
    _module_dir = module_dir
    if not _attached:
        _attached.append(version)
        _patch_kernel()
    return {
        "version": version,
        "module_dir": module_dir,
        "pid": os.getpid(),
        "python": sys.version.split()[0],
        "unavailable": list(UNAVAILABLE),
    }


def _patch_kernel():
    from ipykernel.iostream import OutStream
    from ipykernel.kernelbase import Kernel
    from ipykernel.zmqshell import ZMQInteractiveShell
    from IPython import get_ipython
    from IPython.core.error import StdinNotImplementedError

    from pi_repl_kernel import cell_history, environment, launch, packages, thread_output

    launch._refuse_input(Kernel, StdinNotImplementedError)
    launch._bound_stream_messages(OutStream)
    launch._usage_errors_as_errors(ZMQInteractiveShell)
    thread_output.install()
    environment.adopt_own_interpreter()
    shell = get_ipython()
    if shell is not None:
        cell_history.install(shell)
        packages.install_pip_magic(shell)
        try:
            shell.colors = "nocolor"
        except Exception:  # an IPython without the trait: colours stay, the host strips ANSI
            pass


def put_helper(name, text, digest):
    """Write a helper file the host sent (its own file, not on this machine) next to the module,
    under ``helpers-<digest>/<name>`` (once per content), and return the path to load it from."""
    if not _module_dir:
        raise RuntimeError("pi_repl_kernel.remote.attach has not run in this kernel")
    if os.path.basename(name) != name or not name.endswith(".py"):
        raise ValueError(f"not a helper file name: {name!r}")
    directory = os.path.join(os.path.dirname(_module_dir), "helpers-" + digest)
    path = os.path.join(directory, name)
    if not os.path.isfile(path):
        os.makedirs(directory, mode=0o700, exist_ok=True)
        staging = path + ".partial-%d" % os.getpid()
        with open(staging, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(staging, path)
    return path


def snapshot_place(base, session, key_text):
    """Where this machine keeps a durable session's snapshots: ``<base>/<session>/snapshot``,
    with the host installation's key written to ``<base>/snapshot.key`` (0600). Returns
    ``[snapshot_dir, key_file]`` for ``snapshot.configure``."""
    if os.path.basename(session) != session or session in ("", ".", ".."):
        raise ValueError(f"not a session directory name: {session!r}")
    base = os.path.abspath(os.path.expanduser(base))
    os.makedirs(os.path.join(base, session), mode=0o700, exist_ok=True)
    key_file = os.path.join(base, "snapshot.key")
    try:
        with open(key_file, encoding="utf-8") as handle:
            current = handle.read()
    except OSError:
        current = None
    if current != key_text:
        staging = key_file + ".partial-%d" % os.getpid()
        descriptor = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(key_text)
        os.replace(staging, key_file)
    return [os.path.join(base, session, "snapshot"), key_file]
