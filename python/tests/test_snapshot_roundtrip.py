"""Round trips: what a save holds comes back equal, usable, and wired to the live namespace."""

import dataclasses
import mmap
import time

import numpy as np
import pytest

from conftest import new_namespace, run
from pi_repl_kernel.snapshot import reviving as snapshot_restore
from pi_repl_kernel.snapshot import saving as snapshot_save


def save_and_revive(session, namespace, phase="all"):
    store = session.open(namespace)
    summary = snapshot_save.save(store)
    assert summary["committed"], summary
    revived, result, _ = session.revive(phase=phase)
    assert result["status"] == "ok", result
    return revived, result, summary


def test_plain_values_come_back_equal(session):
    namespace = new_namespace("""
        count = 42
        huge = 10 ** 40
        ratio = 0.25
        text = "naïve — ünïcode"
        raw = b"\\x00\\x01bytes"
        nested = {"a": [1, 2, (3, 4)], "b": {"c": None, "d": True}}
        tags = {"x", "y"}
        frozen = frozenset({1, 2})
        ba = bytearray(b"small")
    """)
    revived, result, _ = save_and_revive(session, namespace)
    for name in ("count", "huge", "ratio", "text", "raw", "nested", "tags", "frozen", "ba"):
        assert revived[name] == namespace[name], name
        assert type(revived[name]) is type(namespace[name]), name
    assert result["failed"] == {} and result["unsaved"] == {}


def test_functions_lambdas_and_closures_work_after_revive(session):
    namespace = new_namespace("""
        def add(a, b=10, *, scale=1):
            "adds"
            return (a + b) * scale
        add.note = "attribute"
        square = lambda value: value * value
        def make_counter():
            total = 0
            def counter():
                nonlocal total
                total += 1
                return total
            return counter
        counter = make_counter()
        counter()
        def fact(n):
            return 1 if n <= 1 else n * fact(n - 1)
    """)
    revived, _, _ = save_and_revive(session, namespace)
    assert revived["add"](1) == 11 and revived["add"](1, 2, scale=3) == 9
    assert revived["add"].__doc__ == "adds" and revived["add"].note == "attribute"
    assert revived["add"].__qualname__ == "add"
    assert revived["square"](7) == 49
    assert revived["counter"]() == 2  # the closure kept its state
    assert revived["fact"](5) == 120  # recursion goes through the live namespace


def test_revived_functions_see_the_live_namespace(session):
    namespace = new_namespace("""
        X = 1
        def read_x():
            return X
        class Reader:
            def read(self):
                return X
        reader = Reader()
        inside = {"fns": [lambda: X]}
    """)
    revived, _, _ = save_and_revive(session, namespace)
    assert revived["read_x"]() == 1
    revived["X"] = 2
    assert revived["read_x"]() == 2
    assert revived["reader"].read() == 2
    assert revived["inside"]["fns"][0]() == 2
    assert revived["read_x"].__globals__ is revived


def test_a_function_reading_a_big_global_does_not_carry_it(session):
    namespace = new_namespace("""
        big = bytes(100 * 1024 * 1024)
        def size_of_big():
            return len(big)
    """)
    store = session.open(namespace)
    snapshot_save.save(store)
    entry = session.manifest()["bindings"]["size_of_big"]
    assert entry["stored_bytes"] < 4096
    assert entry["stream"]["size"] < 4096
    revived, _, _ = session.revive()
    assert revived["size_of_big"]() == 100 * 1024 * 1024


def test_classes_instances_and_dataclasses(session):
    namespace = new_namespace("""
        import dataclasses
        class Base:
            kind = "base"
            def describe(self):
                return f"{self.kind}:{self.value}"
        class Child(Base):
            kind = "child"
            def __init__(self, value):
                self.value = value
            def describe(self):
                return "<" + super().describe() + ">"
        @dataclasses.dataclass
        class Point:
            x: int
            y: int = 0
        child = Child(3)
        point = Point(1, 2)
        points = [Point(3), Point(4)]
    """)
    revived, _, _ = save_and_revive(session, namespace)
    assert revived["child"].describe() == "<child:3>"
    assert type(revived["child"]) is revived["Child"]
    assert revived["Child"].__mro__[1] is revived["Base"]
    assert revived["point"] == revived["Point"](1, 2)
    assert dataclasses.is_dataclass(revived["point"])
    assert all(type(p) is revived["Point"] for p in revived["points"])


def test_instances_refer_to_their_class_instead_of_copying_it(session):
    namespace = new_namespace("""
        class Widget:
            def __init__(self, n):
                self.n = n
        widget = Widget(1)
        handlers = []
        def handle():
            return "handled"
        handlers.append(handle)
    """)
    store = session.open(namespace)
    snapshot_save.save(store)
    bindings = session.manifest()["bindings"]
    assert bindings["widget"]["refs"] == ["Widget"]
    assert bindings["handlers"]["refs"] == ["handle"]
    assert bindings["widget"]["stream"]["size"] < bindings["Widget"]["stream"]["size"]
    revived, _, _ = session.revive()
    assert revived["handlers"][0] is revived["handle"]


def test_a_changed_class_is_seen_by_instances_saved_before(session):
    namespace = new_namespace("""
        class Greeter:
            def hello(self):
                return "v1"
        greeter = Greeter()
    """)
    store = session.open(namespace)
    snapshot_save.save(store)
    run(namespace, "Greeter.hello = lambda self: 'v2'")
    snapshot_save.save(store)
    revived, _, _ = session.revive()
    assert revived["greeter"].hello() == "v2"


def test_aliases_come_back_as_one_object(session):
    namespace = new_namespace("""
        a = [1, 2, 3]
        b = a
        c = a
        n1 = 7
        n2 = 7
    """)
    revived, result, summary = save_and_revive(session, namespace)
    assert summary["aliases"] == {"b": "a", "c": "a"}
    assert revived["b"] is revived["a"] and revived["c"] is revived["a"]
    revived["a"].append(4)
    assert revived["b"] == [1, 2, 3, 4]
    assert "n2" not in summary["aliases"] and revived["n2"] == 7


def test_modules_are_saved_by_reference_and_reimported(session):
    namespace = new_namespace("""
        import json
        import os.path as osp
        import numpy as np
        def dumps(value):
            return json.dumps(value)
    """)
    revived, _, _ = save_and_revive(session, namespace)
    import json
    import os.path
    assert revived["json"] is json and revived["osp"] is os.path and revived["np"] is np
    entry = session.manifest()["bindings"]["np"]
    assert entry["kind"] == "module" and entry["stored_bytes"] < 200
    assert revived["dumps"]([1]) == "[1]"


def test_numpy_arrays_come_back_writable_with_same_dtype_shape_and_values(session):
    namespace = new_namespace("""
        import numpy as np
        small = np.arange(12, dtype=np.int16).reshape(3, 4)
        large = np.linspace(0, 1, 200_000).reshape(400, 500)
        fortran = np.asfortranarray(np.arange(40_000, dtype=np.float32).reshape(200, 200))
        strided = np.arange(100_000)[::2]
        readonly = np.ones(50_000)
        readonly.flags.writeable = False
        records = np.zeros(20_000, dtype=[("a", "i4"), ("b", "f8")])
    """)
    revived, _, _ = save_and_revive(session, namespace, phase="eager")
    for name in ("small", "large", "fortran", "strided", "readonly", "records"):
        original, back = namespace[name], revived[name]
        assert back.dtype == original.dtype and back.shape == original.shape, name
        assert np.array_equal(back, original), name
        assert back.flags.writeable == original.flags.writeable, name
    revived["large"][0, 0] = 5.0
    assert revived["large"][0, 0] == 5.0
    assert _backed_by_mmap(revived["large"])
    bindings = session.manifest()["bindings"]
    assert [b["encoding"] for b in bindings["large"]["buffers"]] == ["raw"]
    assert bindings["small"]["buffers"] == []  # under 64 KiB: in-band


def test_a_large_bytearray_goes_out_of_band_and_comes_back_a_bytearray(session):
    namespace = new_namespace("payload = bytearray(range(256)) * 1024")
    revived, _, _ = save_and_revive(session, namespace)
    assert type(revived["payload"]) is bytearray and revived["payload"] == namespace["payload"]
    assert session.manifest()["bindings"]["payload"]["buffers"][0]["size"] == 256 * 1024


def test_ipython_names_dunders_and_protected_names_are_not_saved(session):
    namespace = new_namespace("""
        In = ["x"]; Out = {}; _ = 1; __ = 2; _i = "c"; _i3 = "c"; _7 = 1; _oh = {}
        exit = quit = None
        helper = lambda: "tool"
        __secret__ = 1
        _mine = "kept"
        kept = 1
    """)
    store = session.open(namespace, protected=["helper"])
    summary = snapshot_save.save(store)
    assert sorted(session.manifest()["bindings"]) == ["_mine", "kept"]
    assert summary["skipped"] == {}


def test_a_name_that_is_not_an_identifier_is_reported_not_dropped(session):
    namespace = new_namespace("ok = 1")
    namespace["not valid"] = 2
    namespace[3] = "not a str key"
    store = session.open(namespace)
    summary = snapshot_save.save(store)
    assert summary["skipped"] == {"not valid": "not a Python identifier"}
    assert session.manifest()["unsaved"] == {"not valid": "not a Python identifier"}


@pytest.mark.big
def test_a_one_gigabyte_array_waits_for_the_rest_phase_and_revives_through_mmap(session):
    namespace = new_namespace()
    namespace["huge"] = np.arange(1 << 27, dtype=np.float64)  # 1 GiB, no two chunks alike
    namespace["note"] = "beside it"
    store = session.open(namespace)
    summary = snapshot_save.save(store)
    assert summary["written_bytes"] >= 1 << 30
    del namespace, store
    started = time.perf_counter()
    revived, eager, store = session.revive(phase="eager")
    elapsed = time.perf_counter() - started
    assert eager["revived"] == ["note"] and eager["pending"] == ["huge"]
    rest = snapshot_restore.restore(store, phase="rest")  # hashes the file, copies nothing
    huge = revived["huge"]
    assert rest["revived"] == ["huge"] and huge.shape == (1 << 27,) and huge.dtype == np.float64
    assert _backed_by_mmap(huge) and huge.flags.writeable
    huge[-1] = 2.0  # copy-on-write: the blob file is not touched
    assert huge[0] == 0.0 and huge[-1] == 2.0 and huge[1 << 26] == float(1 << 26)
    assert session.revive()[0]["huge"][-1] == float((1 << 27) - 1)
    print(f"eager revive beside 1 GiB: {elapsed * 1000:.1f} ms")


def _backed_by_mmap(array):
    """True if the array's memory is a memory map (numpy wraps it in a memoryview)."""
    base = array
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    if isinstance(base, memoryview):
        base = base.obj
    return isinstance(base, mmap.mmap)
