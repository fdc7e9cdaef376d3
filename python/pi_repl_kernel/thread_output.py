"""Output of a thread goes to the cell that started it, not to whichever cell runs now.

ipykernel labels every output message with a *parent header* (the request it belongs to). It
keeps the header in a context variable that the kernel's own thread sets per request, and falls
back to the *current* request's header for any other thread. So a thread started by cell 3 that
prints while cell 5 runs is labelled as cell 5's output (measured with ipykernel 7.4), and the
host cannot tell the two apart.

This module makes a thread remember the header of the request that started it:

- ``threading.Thread.start`` records the starting thread's header on the new thread object;
- the ``parent_header`` of ipykernel's output streams, display publisher and shell reads, in
  order: the context variable (set by ipykernel for its own threads and subshells), the header
  the current thread was started with, the current request's header (as before);
- ``ThreadPoolExecutor.submit`` runs each task with the submitting thread's header, so a pool
  made in one cell and used in a later one prints into the later cell (the cell that asked).

Threads started before any request (ipykernel's own) or by a host call (a helper file that
starts a thread when it loads) carry no header and behave as before: their output goes to the
request that runs when they print. So does a long-lived worker of another library that serves
later cells from a thread it started once (tqdm's monitor, for one): its output is labelled with
the cell that started it.
The host then sees output whose parent is an earlier cell and reports it as that cell's late
output (``docs/kernel-module.md``).
"""

import threading

_ATTRIBUTE = "_pi_repl_parent_header"


def _current_header():
    """The header output of the calling thread is labelled with now; None in a host call."""
    import sys

    from pi_repl_kernel import host

    if host.calling:
        return None
    stream = sys.stdout
    try:
        header = stream.parent_header
    except Exception:  # noqa: BLE001 - not an ipykernel stream (tests, a redirected stdout)
        return None
    return header if isinstance(header, dict) and header else None


def _parent_header(self):
    try:
        return self._parent_header.get()
    except LookupError:
        pass
    inherited = getattr(threading.current_thread(), _ATTRIBUTE, None)
    if inherited:
        return inherited
    return self._parent_header_global


def _patch_parent_header(cls):
    current = cls.__dict__.get("parent_header")
    if not isinstance(current, property) or current.fset is None:
        return False
    cls.parent_header = property(_parent_header, current.fset, None, current.__doc__)
    return True


def _patch_thread_start():
    original_start = threading.Thread.start

    def start(self):
        header = _current_header()
        if header is not None:
            setattr(self, _ATTRIBUTE, header)
        return original_start(self)

    threading.Thread.start = start


def _patch_pool_submit():
    from concurrent.futures import thread as pool_module

    original_submit = pool_module.ThreadPoolExecutor.submit

    def submit(self, fn, /, *args, **kwargs):
        header = _current_header()
        if header is None:
            return original_submit(self, fn, *args, **kwargs)

        def run_as_submitter(*args, **kwargs):
            worker = threading.current_thread()
            before = getattr(worker, _ATTRIBUTE, None)
            setattr(worker, _ATTRIBUTE, header)
            try:
                return fn(*args, **kwargs)
            finally:
                setattr(worker, _ATTRIBUTE, before)

        return original_submit(self, run_as_submitter, *args, **kwargs)

    pool_module.ThreadPoolExecutor.submit = submit


def install():
    """Patch ipykernel's header lookups, ``Thread.start`` and ``ThreadPoolExecutor.submit``."""
    from ipykernel.displayhook import ZMQShellDisplayHook
    from ipykernel.iostream import OutStream
    from ipykernel.zmqshell import ZMQDisplayPublisher, ZMQInteractiveShell

    classes = (OutStream, ZMQDisplayPublisher, ZMQInteractiveShell, ZMQShellDisplayHook)
    patched = [_patch_parent_header(cls) for cls in classes]
    if not patched[0]:
        return  # an ipykernel that keeps headers differently: leave it as it is
    _patch_thread_start()
    _patch_pool_submit()
