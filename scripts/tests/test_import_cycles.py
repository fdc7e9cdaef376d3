"""Tests of scripts/import_cycles.py on tiny crates written here: a cycle is refused and named,
and what is not an import (a comment, a string, a re-export) makes no edge.

Run: `python3 -m unittest discover -s scripts/tests` (scripts/test's `architecture` step does).
"""

import contextlib
import io
import sys
import tempfile
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import import_cycles  # noqa: E402


def crate(files):
    """A temporary `src/` holding `files` ({path: text}); the caller removes it."""
    root = tempfile.TemporaryDirectory()
    src = Path(root.name) / "src"
    for path, text in {"lib.rs": "", **files}.items():
        (src / path).parent.mkdir(parents=True, exist_ok=True)
        (src / path).write_text(text, encoding="utf-8")
    return root, src


class ImportCycles(unittest.TestCase):
    def cycles_of(self, files):
        root, src = crate(files)
        self.addCleanup(root.cleanup)
        return import_cycles.find_cycles(src)

    def test_a_cycle_between_two_top_level_modules_is_refused_and_named(self):
        root, src = crate({
            "engine/mod.rs": "mod cell;\npub use cell::Cell;\n",
            "engine/cell.rs": "use crate::agents::Supervisor;\npub struct Cell;\n",
            "agents/mod.rs": "pub struct Supervisor;\nfn f() { let _ = crate::engine::Cell; }\n",
        })
        self.addCleanup(root.cleanup)
        stderr = io.StringIO()
        with contextlib.redirect_stderr(stderr):
            status = import_cycles.main(src)
        self.assertEqual(status, 1)
        said = stderr.getvalue()
        self.assertIn("error: import cycle between modules: agents -> engine -> agents", said)
        self.assertIn("src/engine/cell.rs:1", said)
        self.assertIn("src/agents/mod.rs:2", said)
        self.assertIn("hint:", said)

    def test_a_crate_without_a_cycle_passes(self):
        root, src = crate({
            "engine/mod.rs": "use crate::kernel::Kernel;\n",
            "kernel/mod.rs": "pub struct Kernel;\n",
        })
        self.addCleanup(root.cleanup)
        with contextlib.redirect_stderr(io.StringIO()):
            self.assertEqual(import_cycles.main(src), 0)

    def test_comments_strings_and_re_exports_make_no_edge(self):
        # engine uses kernel, so any edge back from kernel would be a cycle.
        found = self.cycles_of({
            "engine/mod.rs": "pub struct Engine;\nuse crate::kernel::Kernel;\n",
            "kernel/mod.rs": (
                "pub struct Kernel;\n"
                "// use crate::engine::Engine;\n"
                "/* crate::engine::Engine */\n"
                'const S: &str = "crate::engine::Engine";\n'
                'const R: &str = r#"crate::engine::Engine"#;\n'
                "const C: char = '{';\n"
                "pub use crate::engine::Engine as Again;\n"
            ),
            "cli/mod.rs": "use crate::kernel::Again;\n",
            "main_user.rs": "use crate::engine::Engine;\n",
        })
        self.assertEqual(found, [])

    def test_a_re_export_is_followed_to_the_file_that_defines_the_item(self):
        found = self.cycles_of({
            "mcp/mod.rs": "mod server;\nmod tasks;\npub use tasks::TaskBook;\n",
            "mcp/server.rs": "use super::TaskBook;\npub struct Server;\n",
            "mcp/tasks.rs": "pub struct TaskBook;\nimpl super::server::Server {}\n",
        })
        self.assertEqual(len(found), 1)
        kind, members, steps = found[0]
        self.assertEqual(kind, "files")
        self.assertEqual(members, ["mcp/server.rs", "mcp/tasks.rs"])

    def test_brace_trees_and_child_module_paths_are_read(self):
        found = self.cycles_of({
            "engine/mod.rs": "mod cell;\nuse crate::{kernel::{self, Kernel}, home};\n",
            "engine/cell.rs": "pub struct Cell;\n",
            "kernel/mod.rs": "mod launch;\nuse launch::go;\npub struct Kernel;\n",
            "kernel/launch.rs": "pub fn go() { super::super::engine::cell::Cell; }\n",
            "home.rs": "",
        })
        self.assertEqual([(kind, members) for kind, members, _ in found],
                         [("modules", ["engine", "kernel"])])

    def test_the_folders_checked_file_by_file_refuse_a_cycle_inside_one_folder(self):
        found = self.cycles_of({
            "agents/mod.rs": "mod a;\nmod b;\n",
            "agents/a.rs": "use super::b::B;\npub struct A;\n",
            "agents/b.rs": "pub struct B;\n#[cfg(test)]\nmod tests {\n    use super::super::a::A;\n}\n",
            # The same shape in a folder not checked file by file passes.
            "session/mod.rs": "mod a;\nmod b;\n",
            "session/a.rs": "use super::b::B;\npub struct A;\n",
            "session/b.rs": "use super::a::A;\npub struct B;\n",
        })
        self.assertEqual([(kind, members) for kind, members, _ in found],
                         [("files", ["agents/a.rs", "agents/b.rs"])])


if __name__ == "__main__":
    unittest.main()
