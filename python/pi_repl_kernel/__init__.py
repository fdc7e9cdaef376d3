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
- ``remote``: what ``launch`` applies before a local kernel starts, applied to a running remote
  kernel (``attach``).
- ``cell_history``: Jupyter's ``_``/``Out``/``In`` kept to the last cells; numbering a rebuilt
  kernel's cells on.
- ``thread_output``: a thread's output labelled with the cell that started it.
- ``host_requests``: a cell's requests to the host on the stdin channel (the marked
  ``input_request``) and the lock that keeps them from interleaving.
- ``model_requests``: the kernel side of ``llm_query`` (payload, exceptions, JSON-schema check of
  an answer); the helper itself is ``toolbox/llm.py``.
- ``agents``: the kernel side of sub-agents (``agent/1`` requests, ``AgentHandle``, the live
  fork offered with a spawn, or the in-cell commit when none can be made).
- ``live_fork``: this kernel forked from inside a cell, the copy made a kernel of its own (a
  sub-agent's, ``spawn_agent(fork=True)``).
- ``host_tools``: the kernel side of ``tools.<name>(...)`` (payload, exceptions, images).
- ``toolbox/``: data, not a module: the default helper files (``read``, ``write``, ``edit``,
  ``bash``, ``llm_query``, ``spawn_agent`` and friends, ``tools``), loaded like any user's.
- ``heap_pages``: the small-object heap folded onto huge pages between saves, so a capture's
  ``fork()`` copies fewer page tables.
- ``snapshot/``: the snapshot store, a subpackage whose ``__init__`` is its API as the host
  calls it (configure, capture, save, save_status, restore, rewind, adopt, states, pending,
  status; never raises), over its modules:
  - ``fork``: saving from a forked child (BGSAVE): a capture at every answer, the child's life,
    reaping it, adopting its commit.
  - ``pickling``: one binding <-> pickle stream + out-of-band buffers; functions see live globals
    (it also answers to its old path, ``pi_repl_kernel.snapshot_pickle``, named by older streams).
  - ``items``: large lists and dicts of plain data in chunks of items (format 3).
  - ``blobs``: content-addressed blob files (xxh3_128 ids, zstd streams, raw mmap-able buffers).
  - ``manifest``: the signed, versioned JSON manifest; its checks before anything is unpickled.
  - ``journal``: the revive journal and poisoned marks (a binding that killed the kernel).
  - ``names``: which names are saved, aliases, immutability, kinds, user-facing texts.
  - ``store``: one kernel's store state (configuration, what is committed, tracked, held).
  - ``saving``: incremental save, caps, preemption by SIGINT, commit, garbage collection.
  - ``reviving``: verified, journalled, eager/lazy revive and the pending-name NameError hook.
  - ``kept_states`` and ``rewinding``: the states of answered cells kept, and returning to one.
  - ``adopting``: a finished sub-agent's workspace taken as this one's (``adopt_agent``).
"""
