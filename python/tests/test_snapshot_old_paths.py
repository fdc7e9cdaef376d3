"""Snapshots written before the snapshot modules moved into ``pi_repl_kernel.snapshot`` name the
pickling module by its old path (``pi_repl_kernel.snapshot_pickle``): they still load."""

import pickle

from pi_repl_kernel.snapshot import pickling


def test_a_stream_naming_the_old_module_path_loads():
    # Protocol 0's GLOBAL opcode, as an older stream refers to a class of that module.
    loaded = pickle.loads(b"cpi_repl_kernel.snapshot_pickle\n_EmptyCell\n.")
    assert loaded is pickling._EmptyCell
    rebuilt = pickle.loads(b"cpi_repl_kernel.snapshot_pickle\n_rebuild_function\n.")
    assert rebuilt is pickling._rebuild_function
