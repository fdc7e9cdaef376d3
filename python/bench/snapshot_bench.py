"""Benchmark: the snapshot store beside the old full re-pickle, on ~1 MB, ~100 MB and ~1 GB.

Not a test. Run from the repository root:

    /tmp/pihome/venv/bin/python python/bench/snapshot_bench.py [--sizes 1MB,100MB,1GB]

Baseline ("old"): cloudpickle + zlib level 6 of every binding, written to one file, fsynced (the
system this replaces re-pickled the whole namespace on every snapshot). New: ``snapshot.save`` on
the content-addressed store. For each namespace (mostly numpy arrays, plus small values,
functions, a class and instances):

(a) no-op snapshot: nothing changed since the last one;
(b) one small change: a counter changes next to the arrays (arrays are at most 200 MB each; the
    ``200MB-buffer`` namespace is small values beside one 200 MB buffer);
(c) revive to a usable namespace: the old full load vs the new eager phase, and the new eager
    phase of an empty snapshot for reference (1 GB namespace only unless --revive-all).

New-store figures are the median of ``--repeat`` runs (min and max beside it); the slow baseline
runs 3 times below 1 GB and once at 1 GB. Dirty pages are flushed (``os.sync``) before each
measured phase, so a figure is not inflated by the writeback of data an earlier step wrote. The
page cache is warm: the revive reads files the save just wrote, as after a kernel restart on the
same machine.
"""

import argparse
import builtins
import os
import pickle
import secrets
import shutil
import statistics
import sys
import tempfile
import time
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import cloudpickle  # noqa: E402
import numpy as np  # noqa: E402
import zstandard  # noqa: E402

from pi_repl_kernel import snapshot  # noqa: E402

MB = 1_000_000
SIZES = {"1MB": 1 * MB, "100MB": 100 * MB, "200MB-buffer": 200 * MB, "1GB": 1000 * MB}
SMALL_CODE = """
import math, json
counter = 0
name = "benchmark"
config = {"alpha": 0.1, "beta": [1, 2, 3], "nested": {"k": "v"}}
history = [float(i) for i in range(1000)]
def scale(x, factor=2.0):
    return x * factor * math.pi
def describe(value):
    return json.dumps({"value": value, "name": name})
square = lambda v: v * v
class Record:
    def __init__(self, key, value):
        self.key, self.value = key, value
    def total(self):
        return self.value + counter
records = [Record(i, i * 2) for i in range(100)]
"""


def build_namespace(total_bytes):
    """Small values and functions, plus arrays adding up to about ``total_bytes``.

    Arrays are at most 200 MB each; half hold random data (incompressible), half smooth data.
    """
    namespace = {"__name__": "__main__", "__builtins__": builtins}
    exec(SMALL_CODE, namespace)
    rng = np.random.default_rng(0)
    chunk = min(200 * MB, total_bytes)
    for index in range(max(1, total_bytes // chunk)):
        count = chunk // 8
        if index % 2 == 0:
            namespace[f"array_{index}"] = rng.random(count)
        else:
            namespace[f"array_{index}"] = np.linspace(index, index + 1.0, count)
    return namespace


def user_names(namespace):
    return [n for n in namespace if not (n.startswith("__") and n.endswith("__"))]


# -- the baseline ----------------------------------------------------------------------------

def baseline_save(namespace, path):
    """Full re-pickle: cloudpickle + zlib-6 of every binding, one file, fsync."""
    blobs = {}
    for name in user_names(namespace):
        try:
            blobs[name] = zlib.compress(cloudpickle.dumps(namespace[name]), 6)
        except Exception:  # the old system skipped what it could not pickle, too
            continue
    with open(path, "wb") as file:
        pickle.dump(blobs, file, protocol=5)
        file.flush()
        os.fsync(file.fileno())


def baseline_load(path):
    with open(path, "rb") as file:
        blobs = pickle.load(file)
    namespace = {"__name__": "__main__", "__builtins__": builtins}
    for name, blob in blobs.items():
        namespace[name] = cloudpickle.loads(zlib.decompress(blob))
    return namespace


# -- the new store ---------------------------------------------------------------------------

def configure(state_dir, key_file, namespace):
    result = snapshot.configure(state_dir, key_file, max_binding_bytes=1 << 40,
                                max_total_bytes=1 << 42, namespace=namespace)
    assert result == {"ok": True}, result


def timed(function, *args, **kwargs):
    started = time.perf_counter()
    result = function(*args, **kwargs)
    return time.perf_counter() - started, result


def median_of(repeat, function):
    return statistics.median(function() for _ in range(repeat))


def spread_of(repeat, function):
    """``(median, min, max)`` of ``repeat`` timings."""
    runs = [function() for _ in range(repeat)]
    return statistics.median(runs), min(runs), max(runs)


def bench_size(label, total_bytes, workdir, key_file, repeat, baseline_repeat, revive):
    print(f"\n== namespace ~{label} ==", flush=True)
    namespace = build_namespace(total_bytes)
    array_bytes = sum(v.nbytes for v in namespace.values() if isinstance(v, np.ndarray))
    print(f"arrays: {array_bytes / MB:.0f} MB in "
          f"{sum(isinstance(v, np.ndarray) for v in namespace.values())} bindings; "
          f"{len(user_names(namespace))} bindings in all")

    baseline_path = os.path.join(workdir, f"baseline-{label}.pkl")
    os.sync()
    old_full = median_of(baseline_repeat, lambda: timed(baseline_save, namespace,
                                                        baseline_path)[0])
    print(f"old full re-pickle: {old_full * 1000:.1f} ms "
          f"({os.path.getsize(baseline_path) / MB:.1f} MB file)")

    state_dir = os.path.join(workdir, f"state-{label}")
    configure(state_dir, key_file, namespace)
    snapshot.restore(phase="all")
    first_time, first = timed(snapshot.save)
    assert first["committed"], first
    print(f"first save (everything written): {first_time * 1000:.1f} ms, "
          f"{first['written_bytes'] / MB:.1f} MB written")

    os.sync()
    new_noop = spread_of(repeat, lambda: timed(snapshot.save)[0])
    noop = snapshot.save()
    assert noop["written"] == [] and noop["written_bytes"] == 0, noop
    report("(a) no-op snapshot", old_full, new_noop)

    def one_change():
        namespace["counter"] += 1
        elapsed, summary = timed(snapshot.save)
        assert summary["written"] == ["counter"], summary
        return elapsed

    os.sync()
    new_change = spread_of(repeat, one_change)
    report("(b) one small change", old_full, new_change)

    if revive:
        bench_revive(namespace, baseline_path, state_dir, key_file, workdir, repeat)
    os.unlink(baseline_path)
    shutil.rmtree(state_dir)


def bench_revive(namespace, baseline_path, state_dir, key_file, workdir, repeat):
    os.sync()
    old_load, _ = timed(baseline_load, baseline_path)

    def eager_revive(directory):
        fresh = {"__name__": "__main__", "__builtins__": builtins}
        configure(directory, key_file, fresh)
        elapsed, result = timed(snapshot.restore, phase="eager")
        assert result["status"] in ("ok", "none") and not result["failed"], result
        return elapsed, fresh

    new_eager = spread_of(repeat, lambda: eager_revive(state_dir)[0])
    _, fresh = eager_revive(state_dir)
    assert set(user_names(fresh)) == set(user_names(namespace))
    assert fresh["records"][3].total() == 6 + fresh["counter"]
    report("(c) revive to a usable namespace (eager)", old_load, new_eager)

    empty_dir = os.path.join(workdir, "state-empty")
    os.mkdir(empty_dir)
    empty = {"__name__": "__main__", "__builtins__": builtins}
    configure(empty_dir, key_file, empty)
    snapshot.restore(phase="all")
    snapshot.save()
    new_empty = spread_of(repeat, lambda: eager_revive(empty_dir)[0])
    report("    revive of an empty snapshot (eager), for reference", None, new_empty)
    shutil.rmtree(empty_dir)


def report(what, old, new):
    """Print a pair: ``old`` seconds (or None) and ``new`` as ``(median, min, max)`` seconds."""
    median, low, high = new
    spread = f"new {median * 1000:.2f} ms (min {low * 1000:.2f}, max {high * 1000:.2f})"
    if old is None:
        print(f"{what}: {spread}", flush=True)
        return
    ratio = old / median if median > 0 else float("inf")
    print(f"{what}: old {old * 1000:.1f} ms | {spread} | {ratio:,.0f}x faster", flush=True)


def compression_levels():
    """zstd levels 1-3 and zlib-6 on a mixed pickle stream (records, strings, floats)."""
    data = cloudpickle.dumps({
        "ints": list(range(300_000)),
        "words": [f"word-{i % 5000}" for i in range(200_000)],
        "floats": np.random.default_rng(1).random(100_000).tolist(),
    })
    print(f"\n== compression of a {len(data) / MB:.1f} MB pickle stream ==")
    for level in (1, 2, 3):
        compressor = zstandard.ZstdCompressor(level=level)
        elapsed = median_of(5, lambda: timed(compressor.compress, data)[0])
        size = len(compressor.compress(data))
        print(f"zstd-{level}: {elapsed * 1000:.1f} ms, {size / MB:.2f} MB")
    elapsed, packed = timed(zlib.compress, data, 6)
    print(f"zlib-6: {elapsed * 1000:.1f} ms, {len(packed) / MB:.2f} MB")


# -- large buffers: chunks and the copy-on-write window ---------------------------------------

def bench_chunks(workdir, key_file, size_bytes, repeat):
    """A large array changed in one element, saved in chunks vs whole (the chunk size set above
    the array's size gives the format-1 behaviour: one blob per buffer, rewritten whole)."""
    print(f"\n== one element changed in a {size_bytes / MB:.0f} MB array ==", flush=True)
    from pi_repl_kernel.snapshot import blobs as snapshot_blobs
    chunk_bytes = snapshot_blobs.CHUNK_BYTES
    results = {}
    for label, chunk in (("whole (format 1)", 1 << 62), ("chunks (format 2)", chunk_bytes)):
        snapshot_blobs.CHUNK_BYTES = chunk
        namespace = {"__name__": "__main__", "__builtins__": builtins,
                     "arr": np.random.default_rng(0).random(size_bytes // 8)}
        state_dir = os.path.join(workdir, "state-chunks")
        configure(state_dir, key_file, namespace)
        snapshot.restore(phase="all")
        os.sync()
        first, summary = timed(snapshot.save)
        assert summary["written"] == ["arr"], summary

        def one_element():
            namespace["arr"][12345] += 1.0
            os.sync()
            elapsed, summary = timed(snapshot.save, hint_names=["arr"])
            assert summary["written"] == ["arr"], summary
            return elapsed, summary["written_bytes"]

        runs = [one_element() for _ in range(repeat)]
        median = statistics.median(elapsed for elapsed, _ in runs)
        results[label] = median
        print(f"{label}: first save {first * 1000:.0f} ms; one element changed: "
              f"{median * 1000:.1f} ms (median of {repeat}), {runs[0][1] / MB:.1f} MB written",
              flush=True)
        shutil.rmtree(state_dir)
    snapshot_blobs.CHUNK_BYTES = chunk_bytes
    whole, chunked = results.values()
    print(f"ratio whole / chunks: {whole / chunked:.1f}x", flush=True)


def _pss_kib(pid):
    try:
        with open(f"/proc/{pid}/smaps_rollup") as file:
            for line in file:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError):
        pass
    return 0


def bench_rewrite_during_save(workdir, key_file, size_bytes, repeat):
    """A cell rewriting every page of a large array while a save child writes it, beside the
    same rewrite with no save running. PSS of kernel + child sampled every 5 ms. Rows: the save
    child as it is (writes without copying, releases its pages once written, then fsyncs), and
    with the release off (``_madvise = None``: the child keeps sharing every page to the end)."""
    import threading

    from pi_repl_kernel.snapshot import blobs as snapshot_blobs
    from pi_repl_kernel.snapshot import fork as snapshot_fork
    print(f"\n== rewriting a {size_bytes / MB:.0f} MB array while a save child saves it ==",
          flush=True)
    namespace = {"__name__": "__main__", "__builtins__": builtins,
                 "arr": np.random.default_rng(0).random(size_bytes // 8)}
    state_dir = os.path.join(workdir, "state-cow")
    configure(state_dir, key_file, namespace)
    snapshot.restore(phase="all")
    snapshot.save()
    store = snapshot._store

    def rewrite():
        started = time.perf_counter()
        np.add(namespace["arr"], 1.0, out=namespace["arr"])
        return time.perf_counter() - started

    def during_save():
        namespace["arr"] += 1.0  # the cell before: the array changed, so the save writes it all
        os.sync()
        stop, peak, child = threading.Event(), [0], {}

        def sample():
            while not stop.is_set():
                peak[0] = max(peak[0], _pss_kib(os.getpid()) + _pss_kib(child.get("pid", 0)))
                time.sleep(0.005)

        sampler = threading.Thread(target=sample)
        started = snapshot_fork.start(store, hint_names=["arr"])
        assert started.get("started"), started
        child["pid"] = started["pid"]
        sampler.start()
        elapsed = rewrite()
        saving = time.perf_counter()
        os.waitid(os.P_PID, started["pid"], os.WEXITED | os.WNOWAIT)
        child_left = time.perf_counter() - saving
        stop.set()
        sampler.join()
        finished = snapshot_fork.status(store)["finished"]
        assert finished["committed"] and finished["written"] == ["arr"], finished
        return elapsed, peak[0] * 1024, finished["child_s"], child_left

    base_pss = _pss_kib(os.getpid()) * 1024
    no_save = statistics.median(rewrite() for _ in range(repeat))
    print(f"no save running: rewrite {no_save * 1000:.0f} ms (median of {repeat}); kernel PSS "
          f"{base_pss / MB:.0f} MB", flush=True)
    madvise = snapshot_blobs._madvise
    for label, release in (("save child, pages released once written", madvise),
                           ("save child, release off", None)):
        snapshot_blobs._madvise = release
        runs = [during_save() for _ in range(repeat)]
        elapsed = statistics.median(run[0] for run in runs)
        peak = max(run[1] for run in runs)
        child_s = statistics.median(run[2] for run in runs)
        print(f"{label}: rewrite {elapsed * 1000:.0f} ms ({elapsed / no_save:.2f}x no save); "
              f"peak PSS kernel+child {peak / MB:.0f} MB ({peak / base_pss:.2f}x); "
              f"child ran {child_s:.2f} s", flush=True)
    snapshot_blobs._madvise = madvise
    shutil.rmtree(state_dir)


def bench_big_list(workdir, key_file, count, repeat):
    """A list of ``count`` small tuples (2M: about 300 MB of objects, the host-kill benchmark's
    ``data``) changed in one item per save: pickled whole (chunking off: ``MIN_ITEMS`` set above
    the list's length, the format-2 behaviour) vs in chunks of items (format 3), same run. Each
    save names the list (as a cell that changes it does): in-process, then in a forked save
    child as the kernel saves between cells (its save's own time, and the child's whole life
    from the fork to its exit being seen)."""
    from pi_repl_kernel.snapshot import fork as snapshot_fork
    from pi_repl_kernel.snapshot import items as snapshot_items
    print(f"\n== one item changed in a list of {count:,} tuples ==", flush=True)
    min_items = snapshot_items.MIN_ITEMS
    results = {}
    for label, threshold in (("whole (format 2)", 1 << 62), ("item chunks (format 3)", min_items)):
        snapshot_items.MIN_ITEMS = threshold
        namespace = {"__name__": "__main__", "__builtins__": builtins,
                     "data": [(i, str(i)) for i in range(count)]}
        state_dir = os.path.join(workdir, "state-list")
        configure(state_dir, key_file, namespace)
        snapshot.restore(phase="all")
        os.sync()
        first, summary = timed(snapshot.save)
        assert summary["written"] == ["data"], summary
        calls = iter(range(1, 1 << 30))

        def one_item():
            k = next(calls)
            namespace["data"][k * 7919 % count] = (k, "changed")
            os.sync()
            elapsed, summary = timed(snapshot.save, hint_names=["data"])
            assert summary["written"] == ["data"], summary
            return elapsed, summary["written_bytes"]

        def one_item_in_a_child():
            k = next(calls)
            namespace["data"][k * 7919 % count] = (k, "changed")
            os.sync()
            started = snapshot_fork.start(snapshot._store, hint_names=["data"])
            assert started.get("started"), started
            os.waitid(os.P_PID, started["pid"], os.WEXITED | os.WNOWAIT)
            finished = snapshot_fork.status(snapshot._store)["finished"]
            assert finished["committed"] and finished["written"] == ["data"], finished
            return finished["elapsed_ms"] / 1000, finished["child_s"]

        runs = [one_item() for _ in range(repeat)]
        median = statistics.median(elapsed for elapsed, _ in runs)
        results[label] = median
        print(f"{label}: first save {first * 1000:.0f} ms, {summary['written_bytes'] / MB:.1f} MB "
              f"written; one item changed: {median * 1000:.1f} ms (median of {repeat}, min "
              f"{min(e for e, _ in runs) * 1000:.1f}, max {max(e for e, _ in runs) * 1000:.1f}), "
              f"{statistics.median(w for _, w in runs) / MB:.2f} MB written", flush=True)
        forked = [one_item_in_a_child() for _ in range(repeat)]
        print(f"{label}, in a save child: save {statistics.median(s for s, _ in forked) * 1000:.1f} "
              f"ms, child from fork to exit {statistics.median(c for _, c in forked) * 1000:.1f} ms "
              f"(medians of {repeat})", flush=True)
        namespace.clear()
        shutil.rmtree(state_dir)
    snapshot_items.MIN_ITEMS = min_items
    whole, chunked = results.values()
    print(f"ratio whole / item chunks: {whole / chunked:.1f}x", flush=True)


REVIVE_HUGE = """
import builtins, sys, time
import numpy as np
from pi_repl_kernel import snapshot
namespace = {"__name__": "__main__", "__builtins__": builtins}
snapshot.configure(sys.argv[1], sys.argv[2], max_binding_bytes=2 << 30, max_total_bytes=8 << 30,
                   namespace=namespace)
started = time.perf_counter()
eager = snapshot.restore(phase="eager")
eager_s = time.perf_counter() - started
rest = snapshot.restore(phase="rest")
rest_s = time.perf_counter() - started - eager_s
huge = namespace["huge"]
assert rest["failed"] == {} and huge.shape == (int(sys.argv[3]),), rest
step = max(1, huge.size // 1000)
assert np.array_equal(huge[::step], np.arange(0, huge.size, step, dtype=np.float64))
print(f"revive in a new process: eager {eager_s * 1000:.1f} ms (pending {eager['pending']}), "
      f"rest {rest_s * 1000:.0f} ms (maps and hashes every chunk)")
"""


def bench_huge_array(workdir, key_file, size_bytes):
    """An array over the old 2 GiB per-binding cap, with the host's default caps: saved in
    chunks, then revived in a new process (eager phase, then the rest)."""
    import subprocess
    print(f"\n== a {size_bytes / MB:.0f} MB array with the host's default caps ==", flush=True)
    count = size_bytes // 8
    namespace = {"__name__": "__main__", "__builtins__": builtins,
                 "huge": np.arange(count, dtype=np.float64)}
    state_dir = os.path.join(workdir, "state-huge")
    result = snapshot.configure(state_dir, key_file, max_binding_bytes=2 << 30,
                                max_total_bytes=8 << 30, namespace=namespace)
    assert result == {"ok": True}, result
    snapshot.restore(phase="all")
    elapsed, summary = timed(snapshot.save)
    assert summary["written"] == ["huge"] and summary["skipped"] == {}, summary
    print(f"saved: {elapsed:.1f} s, {summary['written_bytes'] / MB:.0f} MB written", flush=True)
    namespace["huge"][count // 2] = -1.0
    elapsed, summary = timed(snapshot.save, hint_names=["huge"])
    print(f"one element changed: {elapsed * 1000:.0f} ms, "
          f"{summary['written_bytes'] / MB:.1f} MB written", flush=True)
    namespace["huge"][count // 2] = count // 2
    snapshot.save(hint_names=["huge"])
    del namespace
    env = dict(os.environ, PYTHONPATH=os.path.dirname(HERE))
    out = subprocess.run([sys.executable, "-c", REVIVE_HUGE, state_dir, key_file, str(count)],
                         env=env, capture_output=True, text=True, check=True)
    print(out.stdout.strip(), flush=True)
    shutil.rmtree(state_dir)


def raw_vs_zstd(size_bytes=64 * MB):
    """Why raw buffers are not compressed: zstd-1 on random floats, beside writing them raw."""
    data = np.random.default_rng(2).random(size_bytes // 8).tobytes()
    print(f"\n== {size_bytes / MB:.0f} MB of random float64: zstd vs raw ==", flush=True)
    for level in (1, 3):
        compressor = zstandard.ZstdCompressor(level=level)
        elapsed = median_of(3, lambda: timed(compressor.compress, data)[0])
        size = len(compressor.compress(data))
        print(f"zstd-{level}: {elapsed * 1000:.0f} ms, {size / len(data):.3f} of the size")
    path = os.path.join(tempfile.gettempdir(), f"pi-repl-raw-{os.getpid()}")

    def write_raw():
        with open(path, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())

    elapsed = median_of(3, lambda: timed(write_raw)[0])
    os.unlink(path)
    print(f"raw write + fsync: {elapsed * 1000:.0f} ms")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=",".join(SIZES))
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--revive-all", action="store_true",
                        help="measure the revive for every size, not only 1GB")
    parser.add_argument("--big-buffers", metavar="MB", type=int, default=0,
                        help="only the large-buffer rows (chunks, rewrite during a save, raw vs "
                             "zstd) on an array of this many MB")
    parser.add_argument("--big-list", metavar="ITEMS", type=int, default=0,
                        help="only the row of a list of this many small tuples changed in one "
                             "item, pickled whole vs in chunks of items")
    parser.add_argument("--huge", metavar="MB", type=int, default=0,
                        help="only save and revive one array of this many MB (default caps)")
    arguments = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix="pi-repl-snapshot-bench-")
    key_file = os.path.join(workdir, "key")
    with open(key_file, "w") as file:
        file.write(secrets.token_hex(32))
    print(f"python {sys.version.split()[0]}, cloudpickle {cloudpickle.__version__}, "
          f"numpy {np.__version__}, {os.cpu_count()} CPUs, workdir {workdir}")
    try:
        if arguments.big_list:
            bench_big_list(workdir, key_file, arguments.big_list, arguments.repeat)
            return
        if arguments.huge:
            bench_huge_array(workdir, key_file, arguments.huge * MB)
            return
        if arguments.big_buffers:
            size = arguments.big_buffers * MB
            bench_chunks(workdir, key_file, size, arguments.repeat)
            bench_rewrite_during_save(workdir, key_file, size, arguments.repeat)
            raw_vs_zstd()
            return
        for label in arguments.sizes.split(","):
            big = SIZES[label] >= 1000 * MB
            bench_size(label, SIZES[label], workdir, key_file, arguments.repeat,
                       baseline_repeat=1 if big else 3, revive=big or arguments.revive_all)
        compression_levels()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
