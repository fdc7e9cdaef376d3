"""The helper loader: what ``load`` binds and reports, and ``describe_file`` agreeing with it."""

import inspect
import json
import os
import pickle
import sys
import textwrap
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pi_repl_kernel import helpers  # noqa: E402

TOOLBOX = Path(helpers.__file__).parent / "toolbox"
TOOLBOX_FILES = sorted(TOOLBOX.glob("*.py"))


@pytest.fixture
def helper(tmp_path):
    """Write a helper file from (dedented) source and return its path."""

    def make(source, name="sample"):
        path = tmp_path / f"{name}.py"
        path.write_text(textwrap.dedent(source))
        return str(path)

    return make


def loaded_ok(path, namespace):
    record = helpers.load(path, namespace)
    assert record["error"] is None, record["error"]
    return record


def test_public_functions_are_bound_and_imports_and_private_names_are_not(helper):
    path = helper(
        """
        import os
        from json import dumps
        helper_description = "Tools for things."
        LIMIT = 3
        def _private(): return 1
        class Widget: pass
        def first(x):
            '''Return x.

            More text.'''
            return x
        async def second(): pass
        """,
        name="things",
    )
    namespace = {}
    record = loaded_ok(path, namespace)
    assert sorted(namespace) == ["first", "second"]
    assert record["module"] == "pi_repl_helpers.things"
    assert record["summary"] == "Tools for things."
    assert record["functions"] == [
        {"name": "first", "signature": "(x)", "summary": "Return x."},
        {"name": "second", "signature": "()", "summary": None},
    ]
    assert namespace["first"](5) == 5
    # Module-level code ran in the helper's own module, not in the namespace.
    module = sys.modules["pi_repl_helpers.things"]
    assert module.os is os and module.LIMIT == 3
    assert record["file"] == path
    assert json.loads(json.dumps(record)) == record


def test_loaded_functions_pickle_by_reference_and_show_the_source_they_run(helper):
    path = helper(
        """
        def greet(name):
            return f"hello {name}"
        """,
        name="greeter",
    )
    namespace = {}
    loaded_ok(path, namespace)
    greet = namespace["greet"]
    assert pickle.loads(pickle.dumps(greet)) is greet
    cloudpickle = pytest.importorskip("cloudpickle")
    assert cloudpickle.loads(cloudpickle.dumps(greet)) is greet
    original = inspect.getsource(greet)
    assert 'return f"hello {name}"' in original
    # The executed source is pinned: editing the file afterwards does not change what is shown.
    Path(path).write_text("# replaced\n\n\ndef other():\n    pass\n")
    assert inspect.getsource(greet) == original


def test_a_stem_with_dots_or_dashes_still_pickles_by_reference(helper):
    namespace = {}
    record = loaded_ok(helper("def tool(): pass\n", name="my-tools.v2"), namespace)
    assert record["module"] == "pi_repl_helpers.my-tools_v2"
    assert pickle.loads(pickle.dumps(namespace["tool"])) is namespace["tool"]
    assert helpers.describe_file(record["file"])["module"] == record["module"]


def test_all_is_respected_exactly(helper):
    path = helper(
        """
        __all__ = ["shown", "_also_shown", "Box", "VERSION"]
        VERSION = "1.0"
        def shown(): pass
        def _also_shown(): pass
        def not_listed(): pass
        class Box:
            '''A box.'''
            def __init__(self, size=1): self.size = size
        """,
        name="exports",
    )
    namespace = {}
    record = loaded_ok(path, namespace)
    assert list(namespace) == ["shown", "_also_shown", "Box", "VERSION"]
    assert [entry["name"] for entry in record["functions"]] == list(namespace)
    by_name = {entry["name"]: entry for entry in record["functions"]}
    assert by_name["Box"] == {"name": "Box", "signature": "(size=1)", "summary": "A box."}
    assert by_name["VERSION"] == {"name": "VERSION", "signature": None, "summary": None}


def test_all_naming_an_undefined_name_is_an_error_that_binds_nothing(helper):
    path = helper(
        """
        __all__ = ["real", "ghost"]
        def real(): pass
        """,
        name="ghostly",
    )
    namespace = {}
    record = helpers.load(path, namespace)
    assert namespace == {}
    assert record["functions"] == []
    assert record["error"]["type"] == "AttributeError"
    assert "'ghost'" in record["error"]["message"]


MULTILINE = '''
from pathlib import Path
from typing import Optional
import typing

def locate(
    root,
    /,
    pattern: str = "*.py",
    *names: str,
    depth: Optional[int] = None,
    follow: bool = False,
    where: Path = None,
    options: typing.Dict[str, int] = {"a": 1},
    **extra,
) -> list[Path]:
    """Find files."""
'''


def test_multiline_signature_with_defaults_and_annotations_is_exact(helper):
    path = helper(MULTILINE, name="locator")
    namespace = {}
    record = loaded_ok(path, namespace)
    expected = (
        "(root, /, pattern: str = '*.py', *names: str, depth: Optional[int] = None, "
        "follow: bool = False, where: pathlib.Path = None, options: Dict[str, int] = {'a': 1}, "
        "**extra) -> list[pathlib.Path]"
    )
    assert str(inspect.signature(namespace["locate"])) == expected
    assert record["functions"] == [
        {"name": "locate", "signature": expected, "summary": "Find files."}
    ]
    assert helpers.describe_file(path)["functions"] == record["functions"]


def test_function_description_is_accepted_and_helper_description_wins(helper):
    old_style = helper(
        'function_description = """Old\n   style   summary."""\ndef f(): pass\n', name="old"
    )
    assert helpers.load(old_style, {})["summary"] == "Old style summary."
    assert helpers.describe_file(old_style)["summary"] == "Old style summary."
    both = helper(
        'function_description = "old"\nhelper_description = "new"\ndef f(): pass\n', name="both"
    )
    assert helpers.load(both, {})["summary"] == "new"
    assert helpers.describe_file(both)["summary"] == "new"
    neither = helper("def f(): pass\n", name="neither")
    assert helpers.load(neither, {})["summary"] is None


def assert_failed_cleanly(record, path, namespace, module):
    assert namespace == {}, "a failed helper binds nothing"
    assert record["functions"] == [] and record["summary"] is None
    assert module not in sys.modules
    error = record["error"]
    assert error["traceback"], "the helper's own frames are reported"
    assert all("helpers.py" not in line for line in error["traceback"]), "loader frames are dropped"
    assert any(path in line and f"line {error['line']}" in line for line in error["traceback"])
    assert error["text"].endswith(f"{error['type']}: {error['message']}")
    assert json.loads(json.dumps(record)) == record


def test_a_helper_that_raises_at_import_reports_its_file_and_line_and_binds_nothing(helper):
    path = helper(
        """
        def fine(): pass

        def explode():
            return 1 / 0

        explode()
        """,
        name="exploding",
    )
    namespace = {}
    record = helpers.load(path, namespace)
    assert_failed_cleanly(record, path, namespace, "pi_repl_helpers.exploding")
    error = record["error"]
    assert error["type"] == "ZeroDivisionError" and error["message"] == "division by zero"
    assert error["line"] == 5  # the innermost helper line: `return 1 / 0`
    assert error["text"].startswith("Traceback (most recent call last):")
    assert "return 1 / 0" in error["text"] and "explode()" in error["text"]


def test_a_helper_with_a_syntax_error_reports_its_line(helper):
    path = helper("def ok():\n    pass\n\ndef broken(:\n    pass\n", name="syntax")
    namespace = {}
    record = helpers.load(path, namespace)
    assert_failed_cleanly(record, path, namespace, "pi_repl_helpers.syntax")
    assert record["error"]["type"] == "SyntaxError"
    assert record["error"]["line"] == 4
    assert any("def broken(:" in line for line in record["error"]["traceback"])
    static = helpers.describe_file(path)
    assert static["error"]["type"] == "SyntaxError" and static["error"]["line"] == 4


def test_a_helper_calling_sys_exit_at_import_is_reported_and_the_process_goes_on(helper):
    path = helper("import sys\ndef f(): pass\nsys.exit(3)\n", name="quitter")
    namespace = {}
    record = helpers.load(path, namespace)  # must not raise SystemExit
    assert_failed_cleanly(record, path, namespace, "pi_repl_helpers.quitter")
    assert record["error"]["type"] == "SystemExit"
    assert record["error"]["line"] == 3
    assert "sys.exit(3)" in record["error"]["message"]


def test_a_missing_import_and_an_interrupt_at_import_are_reported(helper):
    missing = helper("import no_such_module_for_pi_repl\ndef f(): pass\n", name="needy")
    record = helpers.load(missing, {})
    assert record["error"]["type"] == "ModuleNotFoundError"
    assert "no_such_module_for_pi_repl" in record["error"]["message"]
    assert record["error"]["line"] == 1
    interrupted = helper("def f(): pass\nraise KeyboardInterrupt\n", name="slow")
    namespace = {}
    record = helpers.load(interrupted, namespace)
    assert_failed_cleanly(record, interrupted, namespace, "pi_repl_helpers.slow")
    assert record["error"]["type"] == "KeyboardInterrupt"
    assert "interrupted" in record["error"]["message"]


def test_a_failed_reload_keeps_the_previous_module_and_bindings(helper):
    path = helper("def version(): return 1\n", name="evolving")
    namespace = {}
    loaded_ok(path, namespace)
    first = namespace["version"]
    Path(path).write_text("def version(): return 2\nraise RuntimeError('half-edited')\n")
    record = helpers.load(path, namespace)
    assert record["error"]["type"] == "RuntimeError"
    assert namespace["version"] is first and first() == 1
    assert sys.modules["pi_repl_helpers.evolving"].version is first


def test_a_missing_file_and_a_missing_kernel_namespace_are_errors_not_exceptions(tmp_path, helper):
    absent = str(tmp_path / "absent.py")
    assert helpers.load(absent, {})["error"]["type"] == "FileNotFoundError"
    assert helpers.describe_file(absent)["error"]["type"] == "FileNotFoundError"
    # No IPython kernel in this test process: the default namespace cannot be found.
    record = helpers.load(helper("def f(): pass\n", name="homeless"))
    assert record["error"]["type"] == "RuntimeError" and "namespace=" in record["error"]["message"]


def test_loaded_lists_every_load_and_the_names_bound(helper):
    good = helper("def alpha(): pass\ndef beta(): pass\n", name="listed")
    bad = helper("raise ValueError('nope')\n", name="unlisted")
    helpers.load(good, {})
    helpers.load(bad, {})
    state = helpers.loaded()
    files = [record["file"] for record in state["helpers"]]
    assert files[-2:] == [good, bad]
    assert state["helpers"][-1]["error"]["type"] == "ValueError"
    assert state["names"]["alpha"] == "pi_repl_helpers.listed"
    assert state["names"]["beta"] == "pi_repl_helpers.listed"
    state["names"].clear()  # a copy: the caller cannot change the loader's memory
    assert helpers.loaded()["names"]["alpha"] == "pi_repl_helpers.listed"


def test_describe_file_never_runs_the_file(tmp_path, helper):
    marker = tmp_path / "ran"
    path = helper(f"open({str(marker)!r}, 'w').close()\ndef f(): pass\n", name="sideeffect")
    record = helpers.describe_file(path)
    assert [entry["name"] for entry in record["functions"]] == ["f"]
    assert not marker.exists()


AGREEMENT_CASES = {
    "plain": MULTILINE,
    "future": '''
        from __future__ import annotations
        from pathlib import Path
        helper_description = "Future annotations."
        def take(path: Path, *, mode: str | None = "r") -> dict[str, Path]:
            """Take a path."""
        ''',
    "shapes": '''
        import os
        from collections import OrderedDict
        import typing
        class Local: pass
        def a(x, y=-1, *args, z, **kw): pass
        def b(x, /): pass
        def c(x, /, y, *, z=(1, 2), w=b"x", v=1_000, u=0x10): pass
        def d(n: "Local" = None) -> typing.Optional[typing.List[int]]: pass
        def e(o: OrderedDict, l: Local, u: int | None = None) -> None: pass
        async def f(*, only): """Async."""
        square = lambda n, power=2: n ** power
        if os.name == "posix":
            def g(flag=True): """Defined under if."""
        try:
            def h(): pass
        except Exception:
            pass
        def later(): pass
        later = 42
        def _hidden(): pass
        ''',
    "exports": '''
        __all__ = ["run", "Tool"]
        def run(cmd, timeout: float = 1.5) -> int:
            """Run."""
        def skipped(): pass
        class Tool:
            """A tool."""
            def __init__(self, name, *, verbose=False): pass
        ''',
}


@pytest.mark.parametrize("name", sorted(AGREEMENT_CASES))
def test_describe_file_agrees_with_load_on_names_signatures_and_summaries(helper, name):
    path = helper(textwrap.dedent(AGREEMENT_CASES[name]), name=f"agree_{name}")
    record = loaded_ok(path, {})
    assert record["functions"], "the case binds something"
    assert helpers.describe_file(path) == record


TOOLBOX_FUNCTIONS = {
    "sub_agents.py": ["spawn_agent", "spawn_agents", "wait_all", "adopt_agent", "agents",
                  "final_answer"],
    "bash.py": ["bash"],
    "edit.py": ["edit"],
    "tools.py": ["tools"],
    "llm.py": ["llm_query", "llm_query_batched"],
    "read.py": ["read"],
    "write.py": ["write"],
}
"""What each default helper file binds."""


@pytest.mark.parametrize("path", TOOLBOX_FILES, ids=lambda p: p.name)
def test_describe_file_agrees_with_load_for_the_toolbox(path):
    namespace = {}
    record = loaded_ok(str(path), namespace)
    names = [entry["name"] for entry in record["functions"]]
    assert names == TOOLBOX_FUNCTIONS[path.name]
    assert record["summary"] and "\n" not in record["summary"]
    for entry in record["functions"]:
        value = namespace[entry["name"]]
        if inspect.isfunction(value):
            assert entry["summary"], "each toolbox function has a docstring"
        doc = inspect.getdoc(value)
        assert len(doc) > 500 and "Raises:" in doc, "help() is useful: arguments, returns, errors"
    described = helpers.describe_file(str(path))
    # Reading the AST cannot see a callable instance's signature (``tools``); that is documented.
    for entry, seen in zip(record["functions"], described["functions"]):
        if not inspect.isfunction(namespace[entry["name"]]):
            assert seen["signature"] is None
            seen["signature"] = entry["signature"]
    assert described == record


def test_the_toolbox_is_data_not_a_package():
    assert [p.name for p in TOOLBOX_FILES] == sorted(TOOLBOX_FUNCTIONS)
    assert not (TOOLBOX / "__init__.py").exists()
