"""heap_pages: dense anonymous mappings folded onto huge pages, sparse ones and a saving child's
heap left alone (issue 21: a capture's fork of a small-object heap)."""

import ctypes
import mmap

import pytest

from pi_repl_kernel import heap_pages

MIB = 1 << 20


def _thp_mode():
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as file:
            return file.read().split("[")[1].split("]")[0]
    except (OSError, IndexError):
        return "never"


def _private(size, touched_pages):
    area = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    for page in range(touched_pages):
        area[page * 4096] = 1
    address = ctypes.addressof(ctypes.c_char.from_buffer(area))
    return area, address


def _huge_bytes_at(address):
    with open("/proc/self/smaps") as file:
        lines = file.read().splitlines()
    inside = False
    for line in lines:
        head = line.split()
        if head and "-" in head[0] and ":" not in head[0]:
            low, high = (int(part, 16) for part in head[0].split("-"))
            inside = low <= address < high
        elif inside and line.startswith("AnonHugePages:"):
            return int(line.split()[1]) * 1024
    return 0


def test_a_dense_mapping_is_found_and_a_sparse_one_is_not():
    # One at a time: adjacent anonymous mappings merge into one (whose density is their mix).
    dense, dense_at = _private(16 * MIB, 16 * MIB // 4096)
    ranges = heap_pages.dense_ranges()
    assert any(start <= dense_at + 4 * MIB < end for start, end in ranges)
    for start, end in ranges:
        assert start % heap_pages.HUGE == 0 and end % heap_pages.HUGE == 0
    dense.close()
    sparse, sparse_at = _private(16 * MIB, 1)
    ranges = heap_pages.dense_ranges()
    assert not any(start <= sparse_at + 4 * MIB < end for start, end in ranges)
    sparse.close()


@pytest.mark.skipif(_thp_mode() == "never", reason="transparent huge pages are off here")
def test_collapse_puts_a_dense_mapping_on_huge_pages_and_stops_for_a_child():
    area, address = _private(16 * MIB, 16 * MIB // 4096)
    assert _huge_bytes_at(address) == 0
    assert heap_pages.collapse(child_alive=lambda: True) == 0  # a child shares the heap
    assert _huge_bytes_at(address) == 0
    assert heap_pages.collapse() > 0
    assert _huge_bytes_at(address) >= 8 * MIB  # the 2 MiB-aligned middle of 16 MiB
    area.close()


def test_a_pass_starts_only_when_enabled_grown_and_no_child(monkeypatch):
    started = []
    monkeypatch.setattr(heap_pages, "_pass", lambda child_alive: started.append(child_alive))
    monkeypatch.setattr(heap_pages, "_state", {"last_rss": 0, "thread": None})
    monkeypatch.setattr(heap_pages, "GROWTH_BYTES", 16 * MIB)  # this process holds more
    monkeypatch.setattr(heap_pages, "enabled", False)
    assert heap_pages.maybe_collapse(lambda: False) is False
    monkeypatch.setattr(heap_pages, "enabled", True)
    assert heap_pages.maybe_collapse(lambda: True) is False  # a save child is alive
    assert heap_pages.maybe_collapse(lambda: False) is True
    heap_pages._state["thread"].join()
    assert len(started) == 1
    assert heap_pages.maybe_collapse(lambda: False) is False  # not grown since
