"""Waiting for what a test is about, never for a length of time: the one "eventually" helper of
the Python tests (issue 24).

A test that needs something to have happened (a file written, a journal line, a process gone)
states it as a check and waits until the check holds. The limit only turns a hang into a failure
naming what never happened; it is generous (a loaded 2-core machine), and nothing is asserted
about how soon the check held (timings are benchmarks, ``python/bench/``).

Not for sleeps that are the workload (a ``__reduce__`` that is slow on purpose, a kill at a
random moment): those say so where they are.
"""

import time

LOOK_AGAIN = 0.02
"""How long a check rests between looks (seconds): short beside anything a test waits for."""


def poll(check, timeout):
    """Look at ``check()`` until it returns something true and return that; ``None`` once
    ``timeout`` seconds passed without it (for a test with its own message)."""
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() >= deadline:
            return None
        time.sleep(LOOK_AGAIN)


def eventually(check, what, timeout=60):
    """Wait until ``check()`` returns something true and return it; fail saying ``what`` did not
    happen within ``timeout`` seconds."""
    found = poll(check, timeout)
    if not found:
        raise AssertionError(f"{what}: did not happen within {timeout} s")
    return found
