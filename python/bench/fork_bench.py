"""Benchmark: the kernel's pause at ``fork()`` with and without glibc's huge-page tunable.

Not a test. Run from the repository root:

    target/test-home/venv/bin/python python/bench/fork_bench.py [--repeat 15]

A durable session forks the kernel at every answer that changed something (the capture), so
the fork's own time is added to such an answer. ``fork()`` copies the page tables of what is
resident: with 4 KiB pages one entry per page. pi-repl starts its kernel with
``GLIBC_TUNABLES=glibc.malloc.hugetlb=1`` (``src/kernel/huge_pages.rs``), which puts glibc's
heap and large allocations on 2 MiB transparent huge pages where the system allows them.

Each row runs in a fresh interpreter, once with the tunable and once without (the baseline),
in the same run: the median and minimum of ``--repeat`` forks (the child ``_exit``s at once)
and how much of the process is on huge pages. Rows: 1 GiB ``bytearray`` (glibc's mmap), 1 GiB
numpy array (numpy advises huge pages itself, but its mapping is not aligned), 2M small tuples
(CPython's own arenas: not glibc's heap, so the tunable does not reach them; "with" runs
``heap_pages.collapse()`` on them first, as pi-repl's kernel does between saves).
"""

import argparse
import json
import os
import subprocess
import sys

CHILD = r"""
import json, os, statistics, sys, time
kind, repeat = sys.argv[1], int(sys.argv[2])
if kind == "bytearray":
    held = bytearray(1 << 30)
    for at in range(0, len(held), 4096):
        held[at] = 1
elif kind == "numpy":
    import numpy as np
    held = np.ones((1 << 30) // 8)
else:
    held = [(i, str(i)) for i in range(2_000_000)]
    if sys.argv[3] == "collapse":  # what pi-repl's kernel does between saves (heap_pages)
        sys.path.insert(0, sys.argv[4])
        from pi_repl_kernel import heap_pages
        heap_pages.collapse()
times = []
for _ in range(repeat):
    started = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    times.append((time.perf_counter() - started) * 1000)
    os.waitpid(pid, 0)
rollup = dict(line.split(":", 1) for line in open("/proc/self/smaps_rollup").read().splitlines()[1:])
mib = lambda key: int(rollup[key].split()[0]) // 1024
print(json.dumps({"median": statistics.median(times), "min": min(times),
                  "rss": mib("Rss"), "huge": mib("AnonHugePages")}))
"""


def run(kind, repeat, tunable):
    env = dict(os.environ)
    env.pop("GLIBC_TUNABLES", None)
    if tunable:
        env["GLIBC_TUNABLES"] = "glibc.malloc.hugetlb=1"
    package_root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    out = subprocess.run([sys.executable, "-c", CHILD, kind, str(repeat),
                          "collapse" if tunable else "plain", package_root], env=env,
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    with open("/sys/kernel/mm/transparent_hugepage/enabled") as file:
        print("THP mode:", file.read().strip())
    print(f"{'resident':<28} {'without (baseline)':>26} {'with (pi-repl)':>26} {'ratio':>7}")
    for kind, label in [("bytearray", "1 GiB bytearray"), ("numpy", "1 GiB numpy array"),
                        ("tuples", "2M small tuples (~330 MB)")]:
        base, ours = run(kind, args.repeat, False), run(kind, args.repeat, True)
        cell = "{median:6.2f} ms (min {min:5.2f}), {huge:4d} MiB huge"
        print(f"{label:<28} {cell.format(**base):>26} {cell.format(**ours):>26} "
              f"{base['median'] / ours['median']:6.1f}x")


if __name__ == "__main__":
    main()
