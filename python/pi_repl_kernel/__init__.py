"""The kernel-side half of pi-repl.

This package is embedded in the `pi-repl` binary, written under `$PI_REPL_HOME/lib/`, and imported
by the kernel process only. It never binds a name in the user's namespace: the host reaches it with
``__import__("pi_repl_kernel")`` from silent cells.

Modules:
- ``launch``: boots an ipykernel configured for pi-repl (lifeline to the host, bounded output
  messages, a clear ``input()`` error, no history, no colour).
- ``namespace``: starts the kernel in its own user, PID and mount namespace (a cell sees only the
  kernel's processes), or says why it cannot.
- ``host``: how the host calls into this package from silent cells and reads JSON results back.
- ``helpers``: runs a helper file in its own module and binds its public functions (``load``).
- ``toolbox_support``: the toolbox's one I/O core (path policy, regular-file check, capped
  line reading, the atomic writer shared with the snapshot store, text results).
- ``toolbox/``: data, not a module: the default helpers ``read``, ``write``, ``edit``, ``bash``.
- ``snapshot``: the snapshot store's API (configure, save, restore, pending, status); never raises.
- ``snapshot_pickle``: one binding <-> pickle stream + out-of-band buffers; functions see live globals.
- ``snapshot_blobs``: content-addressed blob files (xxh3_128 ids, zstd streams, raw mmap-able buffers).
- ``snapshot_manifest``: the signed, versioned JSON manifest; its checks before anything is unpickled.
- ``snapshot_journal``: the revive journal and poisoned marks (a binding that killed the kernel).
- ``snapshot_namespace``: which names are saved, aliases, immutability, kinds, user-facing texts.
- ``snapshot_store``: one kernel's store state (configuration, what is committed, tracked, held).
- ``snapshot_save``: incremental save, caps, preemption by SIGINT, commit, garbage collection.
- ``snapshot_restore``: verified, journalled, eager/lazy revive and the pending-name NameError hook.
"""
