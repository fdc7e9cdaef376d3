"""The kernel-side half of pi-repl.

This package is embedded in the `pi-repl` binary, written under `$PI_REPL_HOME/lib/`, and imported
by the kernel process only. It never binds a name in the user's namespace: the host reaches it with
``__import__("pi_repl_kernel")`` from silent cells.

Modules:
- ``launch``: boots an ipykernel configured for pi-repl (lifeline to the host, bounded output
  messages, a clear ``input()`` error, no history, no colour).
- ``host``: how the host calls into this package from silent cells and reads JSON results back.
- ``helpers``: runs a helper file in its own module and binds its public functions (``load``).
- ``toolbox/``: data, not a module: the default helpers ``read``, ``write``, ``edit``, ``bash``.
"""
