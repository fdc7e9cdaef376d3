"""The kernel's small-object heap folded onto huge pages, so a capture's ``fork()`` stays short.

Why: a durable session forks the kernel at every answer that changed something (the capture,
``snapshot_fork``), and ``fork()`` copies one page-table entry per resident 4 KiB page. glibc's
heap and numpy's buffers are on 2 MiB transparent huge pages already (the host's
``glibc.malloc.hugetlb=1``, ``src/kernel/huge_pages.rs``; numpy advises its own), but CPython's
small objects live in pymalloc's 1 MiB arenas, plain anonymous mappings on 4 KiB pages: with a
300 MB list of tuples the fork took 6.8 ms, and 0.71 ms once those arenas were collapsed onto
huge pages (``python/bench/fork_bench.py``, ``docs/benchmarks.md``).

What: ``MADV_COLLAPSE`` (Linux 6.1+) on the dense anonymous read-write mappings, 2 MiB-aligned,
in a background thread at a lowered priority, after the heap grew by ``GROWTH_BYTES`` since the
last pass. Only when no save child is alive: collapsing pages a child still shares copies them
(the parent's memory would double while the child saves), so the pass stops between steps as
soon as a capture forks one. Dense only (resident at least ``DENSE``): a sparse mapping, such
as a thread's stack, would grow by the pages a huge page fills in.

Best effort: an older Linux (``EINVAL``), THP ``never``, a libc without ``madvise``, or the
host's ``PI_REPL_HUGE_PAGES=0`` (``enabled`` stays false) leaves the heap as it is. Copy-on-write
after a fork stays at 4 KiB (Linux splits a shared huge page at its first write).
"""

import ctypes
import os
import threading

MADV_HUGEPAGE = 14
MADV_COLLAPSE = 25
HUGE = 2 << 20
STEP_BYTES = 16 << 20
"""A pass collapses this much at a time, then looks whether a save child started."""
GROWTH_BYTES = 64 << 20
"""How much the resident heap must grow since the last pass for another one."""
DENSE = 0.9
"""The part of a mapping that must be resident for it to be collapsed."""
NICENESS = 10
"""How much the collapsing thread lowers its priority: it works while the kernel idles."""

enabled = False
"""Set at start by ``launch`` when the host put the kernel on huge pages."""

_state = {"last_rss": 0, "thread": None}
_madvise = None


def maybe_collapse(child_alive):
    """Start a background pass when the heap grew enough and no pass runs. ``child_alive()``
    says whether a save child is alive (checked before each step). Never raises."""
    if not enabled:
        return False
    thread = _state["thread"]
    if thread is not None and thread.is_alive():
        return False
    rss = _resident_bytes()
    if rss is None or rss - _state["last_rss"] < GROWTH_BYTES or child_alive():
        return False
    _state["last_rss"] = rss
    thread = threading.Thread(target=_pass, args=(child_alive,), name="pi-repl-heap-pages",
                              daemon=True)
    _state["thread"] = thread
    thread.start()
    return True


def collapse(child_alive=lambda: False):
    """Collapse the dense anonymous mappings now; return the bytes asked for (not all of them
    may have become huge pages: a range the kernel cannot collapse is skipped)."""
    advise = _libc_madvise()
    if advise is None:
        return 0
    asked = 0
    for start, end in dense_ranges():
        at = start
        while at < end:
            if child_alive():
                return asked
            step = min(STEP_BYTES, end - at)
            advise(at, step, MADV_HUGEPAGE)
            if advise(at, step, MADV_COLLAPSE) != 0 and ctypes.get_errno() == 22:
                return asked  # EINVAL: this Linux has no MADV_COLLAPSE
            asked += step
            at += step
    return asked


def dense_ranges():
    """The 2 MiB-aligned parts of anonymous read-write mappings that are mostly resident and not
    yet on huge pages, from ``/proc/self/smaps``."""
    ranges = []
    try:
        with open("/proc/self/smaps") as file:
            lines = file.read().splitlines()
    except OSError:
        return ranges
    current = None
    fields = {}
    for line in lines + ["0-0 ---p 0 0:0 0"]:
        head = line.split(None, 5)
        if len(head) >= 5 and "-" in head[0] and ":" not in head[0]:
            if current is not None:
                _add_range(ranges, current, fields)
            low, high = (int(part, 16) for part in head[0].split("-"))
            anonymous = len(head) == 5 or not head[5].strip()
            current = (low, high) if anonymous and head[1].startswith("rw") else None
            fields = {}
        elif current is not None and ":" in line:
            key, _, value = line.partition(":")
            if key in ("Rss", "AnonHugePages"):
                fields[key] = int(value.split()[0]) * 1024
    return ranges


def _add_range(ranges, mapping, fields):
    low, high = mapping
    start = (low + HUGE - 1) & ~(HUGE - 1)
    end = high & ~(HUGE - 1)
    size = high - low
    if end <= start or size <= 0:
        return
    small = fields.get("Rss", 0) - fields.get("AnonHugePages", 0)
    if fields.get("Rss", 0) >= DENSE * size and small >= HUGE:
        ranges.append((start, end))


def _pass(child_alive):
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), NICENESS)
    except (OSError, AttributeError):
        pass
    try:
        collapse(child_alive)
    except Exception:  # best effort: the heap stays as it is
        pass


def _resident_bytes():
    try:
        with open("/proc/self/statm") as file:
            return int(file.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def _libc_madvise():
    global _madvise
    if _madvise is None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            function = libc.madvise
            function.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
            function.restype = ctypes.c_int
            _madvise = function
        except (OSError, AttributeError):
            _madvise = False
    return _madvise or None
