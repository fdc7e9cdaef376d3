"""Times the default toolbox's ``read`` and ``edit`` on the benchmark files made by
``extension/scripts/toolbox-bench.mjs`` (which runs this and compares with pi's own tools).

Usage: python toolbox_bench.py BIG_FILE BIG_LINES EDIT_FILE EDIT_LINE RUNS
Prints one JSON object: the median seconds of each operation, at function level (no kernel).
"""

import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from pi_repl_kernel import helpers  # noqa: E402

TOOLBOX = os.path.join(os.path.dirname(helpers.__file__), "toolbox")


def median_seconds(runs, action):
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        action()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main():
    big, big_lines, edit_file, edit_line, runs = sys.argv[1:6]
    big_lines, edit_line, runs = int(big_lines), int(edit_line), int(runs)
    os.environ["PI_REPL_ALLOW_WRITE"] = os.path.dirname(os.path.abspath(edit_file))
    namespace = {}
    for name in ("read", "edit"):
        record = helpers.load(os.path.join(TOOLBOX, f"{name}.py"), namespace)
        assert record["error"] is None, record["error"]
    read, edit = namespace["read"], namespace["edit"]

    tail = read(big, offset=big_lines - 99, limit=100)
    assert tail.count("\n") == 99 and f"line {big_lines:08d} " in tail.splitlines()[-1], tail[-200:]
    assert read(big, offset=-100) == tail
    marker = f"line {edit_line:08d}"
    state = {"old": marker, "new": marker.upper()}

    def one_edit():
        edit(edit_file, state["old"], state["new"])
        state["old"], state["new"] = state["new"], state["old"]

    result = {
        "read_last_100_offset": median_seconds(
            runs, lambda: read(big, offset=big_lines - 99, limit=100)
        ),
        "read_last_100_negative": median_seconds(runs, lambda: read(big, offset=-100)),
        "edit_one_line": median_seconds(runs * 2, one_edit),
    }
    if state["old"] != marker:
        one_edit()  # leave the file as it was
    print(json.dumps(result))


if __name__ == "__main__":
    main()
