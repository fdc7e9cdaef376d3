"""Crash consistency: a saver SIGKILLed at random moments always leaves a loadable snapshot.

Each trial forks a child that revives the session and then saves over and over, changing every
binding to the next generation each time; once the child says its revive is done (a kill during
a revive would rightly poison the binding being unpickled, which is another test's subject), the
parent kills it after a random delay and revives the session itself. The snapshot must verify
completely and be one whole generation (all bindings agree), never older than the one before.
"""

import os
import random
import signal
import time

import numpy as np

from conftest import new_namespace
from pi_repl_kernel.snapshot import reviving as snapshot_restore
from pi_repl_kernel.snapshot import saving as snapshot_save

TRIALS = 50


def _saver(session, ready_fd):
    """Child body: revive, say so, then save successive generations until killed."""
    namespace = new_namespace()
    store = session.store(namespace)
    snapshot_restore.restore(store, phase="all")
    os.write(ready_fd, b"r")
    generation = namespace.get("generation", 0)
    while True:
        generation += 1
        namespace["generation"] = generation
        namespace["label"] = f"generation {generation}"
        namespace["numbers"] = list(range(generation, generation + 1000))
        namespace["array"] = np.full(50_000, generation, dtype=np.int64)  # out-of-band blob
        namespace["mirror"] = {"generation": generation}
        snapshot_save.save(store)


def test_a_saver_killed_at_random_moments_leaves_a_complete_snapshot(session):
    rng = random.Random(1234)
    last_generation = 0
    completed = 0
    for trial in range(TRIALS):
        ready_read, ready_write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child never returns into pytest
            try:
                os.close(ready_read)
                _saver(session, ready_write)
            finally:
                os._exit(1)
        os.close(ready_write)
        assert os.read(ready_read, 1) == b"r", "the child died before saving"
        os.close(ready_read)
        time.sleep(rng.uniform(0.0, 0.05))
        os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL

        revived, result, _ = session.revive()
        if result["status"] == "none":
            assert last_generation == 0, "a committed snapshot disappeared"
            continue
        assert result["status"] == "ok", result
        assert result["failed"] == {} and result["pending"] == [] and result["poisoned"] == {}
        generation = revived["generation"]
        assert revived["label"] == f"generation {generation}"
        assert revived["numbers"] == list(range(generation, generation + 1000))
        assert revived["array"].shape == (50_000,) and (revived["array"] == generation).all()
        assert revived["mirror"] == {"generation": generation}
        assert generation >= last_generation
        last_generation = generation
        completed += 1
    print(f"{completed} trials revived a snapshot; last generation {last_generation}")
    assert completed >= TRIALS // 2  # most trials got past their first commit
