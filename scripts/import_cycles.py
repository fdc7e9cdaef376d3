"""The crate's import graph, and its cycles: a cycle is a pair of rooms neither can be read without
the other, so none is allowed.

Reads every `src/**/*.rs` (comments and string literals blanked first), finds each path that
starts with `crate::`, `super::`, `self::` or a child module's name (`use` trees with braces
included), and resolves it to the file that defines the item: through child modules, and
through re-exports (`pub use a::B;` in a `mod.rs` is followed to `a.rs`, and is not itself an
edge). `#[macro_export]` macros are found in the file that defines them.

Two graphs must have no cycle:

- the top-level modules (`engine`, `mcp`, `kernel`, ... and the single files beside them), an
  edge when any file of one names an item of the other;
- the files of the folders in `FILE_LEVEL` (each file its own node; an edge only between two
  files of those folders).

`main()` prints each cycle it finds (`error:` with the modules in order and, for each edge, the
file and line that makes it) and returns 1; the test is `scripts/tests/test_import_cycles.py`.
"""

import re
import sys
from pathlib import Path

# Folders whose files are checked one by one (the ones a cycle went through before issue 24).
# Not `engine`, `kernel`, `cli`: each is a facade whose `mod.rs` holds the types its files
# implement and names those files' functions back (`Kernel` and `local/boot.rs`, `Engine` and
# `cell`, the `Cli` and its commands); `kernel` has no other file cycle.
FILE_LEVEL = ("agents", "config", "mcp", "python_env", "view")

_CHAR_LITERAL = re.compile(r"'(?:[^'\\\n]|\\(?:u\{[0-9a-fA-F]+\}|x[0-9a-fA-F]{2}|.))'")
_RAW_STRING = re.compile(r'b?r(#*)"')


def blank_comments_and_strings(source):
    """The source with comments, string and char literals replaced by spaces (newlines kept)."""
    out = []
    i, n = 0, len(source)

    def blank(text):
        return re.sub(r"[^\n]", " ", text)

    while i < n:
        c = source[i]
        if source.startswith("//", i):
            end = source.find("\n", i)
            end = n if end < 0 else end
            out.append(blank(source[i:end]))
            i = end
        elif source.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if source.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif source.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(blank(source[i:j]))
            i = j
        elif (m := _RAW_STRING.match(source, i)) and (i == 0 or not _is_ident(source[i - 1])):
            closing = '"' + m.group(1)
            end = source.find(closing, m.end())
            end = n if end < 0 else end + len(closing)
            out.append(blank(source[i:end]))
            i = end
        elif c == '"' or (c == "b" and source.startswith('b"', i) and (i == 0 or not _is_ident(source[i - 1]))):
            j = i + (2 if c == "b" else 1)
            while j < n and source[j] != '"':
                j += 2 if source[j] == "\\" else 1
            out.append(blank(source[i:j + 1]))
            i = j + 1
        elif c == "'" and (m := _CHAR_LITERAL.match(source, i)):
            out.append(blank(m.group(0)))
            i = m.end()
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _is_ident(c):
    return c.isalnum() or c == "_"


class Crate:
    """The modules of one crate: which file each is, and what each `mod.rs` re-exports."""

    def __init__(self, src):
        self.src = Path(src)
        self.files = {}  # module path (tuple) -> file (relative to src)
        self.code = {}  # file -> blanked source
        self.macros = {}  # exported macro name -> file
        for path in sorted(self.src.rglob("*.rs")):
            rel = path.relative_to(self.src).as_posix()
            if rel == "main.rs":
                continue  # the binary: a crate of its own
            parts = rel[: -len(".rs")].split("/")
            if parts[-1] == "mod":
                parts = parts[:-1]
            if parts == ["lib"]:
                parts = []
            self.files[tuple(parts)] = rel
            code = blank_comments_and_strings(path.read_text(encoding="utf-8"))
            self.code[rel] = code
            for m in re.finditer(r"#\[macro_export\]\s*macro_rules!\s*(\w+)", code):
                self.macros[m.group(1)] = rel
        self.inline = {}  # file -> [(start, end, module path)] of its inline `mod x { ... }`
        self.reexports = {}  # module path -> {name: (base module, segments)}
        for module, rel in self.files.items():
            self.inline[rel] = list(_inline_modules(self.code[rel], module))
        for module, rel in self.files.items():
            self.reexports[module] = {}
            for statement in re.finditer(r"\bpub(?:\([^)]*\))?\s+use\s+([^;]+);", self.code[rel]):
                for segments, alias in _use_tree(statement.group(1)):
                    start = self._start(module, segments)
                    if start is None or not segments or segments[-1] in ("*", "self"):
                        continue
                    self.reexports[module][alias or segments[-1]] = start

    def module_at(self, rel, offset):
        """The module a position in a file is in (an inline `mod tests` is a module of its own)."""
        module = next(m for m, r in self.files.items() if r == rel)
        for start, end, inner in self.inline[rel]:
            if start <= offset < end and len(inner) > len(module):
                module = inner
        return module

    def _is_module(self, module):
        return module in self.files or any(
            inner == module for spans in self.inline.values() for _, _, inner in spans)

    def _start(self, module, segments):
        """Where a path starts: (base module, the rest of its segments), None if outside the crate."""
        head, rest = segments[0], list(segments[1:])
        if head == "crate":
            return (), rest
        if head == "self":
            return module, rest
        if head == "super":
            base = module[:-1]
            while rest and rest[0] == "super":
                base, rest = base[:-1], rest[1:]
            return base, rest
        if self._is_module(module + (head,)):
            return module, list(segments)
        return None

    def resolve(self, module, segments, depth=0):
        """The file defining what a path names, from a module; None if not in this crate."""
        start = self._start(module, segments)
        if start is None:
            return None
        return self._walk(*start, depth)

    def _walk(self, base, rest, depth):
        while rest and self._is_module(base + (rest[0],)):
            base, rest = base + (rest[0],), rest[1:]
        if rest and depth < 8:
            target = self.reexports.get(base, {}).get(rest[0])
            if target is not None:
                return self._walk(target[0], list(target[1]) + rest[1:], depth + 1)
        if not base and rest and rest[0] in self.macros:
            return self.macros[rest[0]]
        return self._file_of(base)

    def _file_of(self, module):
        while module not in self.files:
            module = module[:-1]
        return self.files[module]

    def references(self):
        """Every (from file, line, to file) a path in the code makes, re-exports left out."""
        for rel, code in self.code.items():
            reexport_spans = [m.span() for m in re.finditer(r"\bpub(?:\([^)]*\))?\s+use\s+[^;]+;", code)]
            for offset, segments in _paths(code):
                if any(a <= offset < b for a, b in reexport_spans):
                    continue
                module = self.module_at(rel, offset)
                target = self.resolve(module, segments)
                if target is not None and target != rel:
                    yield rel, code.count("\n", 0, offset) + 1, target


def _inline_modules(code, module):
    """(start, end, module path) of each inline `mod name { ... }` in a file."""
    for m in re.finditer(r"\bmod\s+(\w+)\s*\{", code):
        depth, j = 1, m.end()
        while j < len(code) and depth:
            depth += {"{": 1, "}": -1}.get(code[j], 0)
            j += 1
        yield m.start(), j, module + (m.group(1),)
    # Nested inline modules are rare here; a module inside one is named from the file's module.


def _use_tree(text):
    """The paths of a `use` tree (`a::{b, c::d as e, self}`) as (segments, alias) pairs."""
    text = re.sub(r"\s+", "", text)
    results = []

    def parse(prefix, s, i):
        """Parse one tree at s[i:], return the index after it."""
        segments = list(prefix)
        while True:
            m = re.compile(r"(\w+|\*)").match(s, i)
            if s.startswith("{", i):
                i += 1
                while not s.startswith("}", i):
                    i = parse(segments, s, i)
                    if s.startswith(",", i):
                        i += 1
                return i + 1
            if not m:
                return i
            segments.append(m.group(1))
            i = m.end()
            if s.startswith("::", i):
                i += 2
                continue
            alias = None
            if s.startswith("as", i) and re.match(r"as\w", s[i:]):
                alias = re.match(r"as(\w+)", s[i:]).group(1)
                i += 2 + len(alias)
            if segments[-1] == "self":
                segments = segments[:-1]
            results.append((segments, alias))
            return i

    parse([], text, 0)
    return [(segments, alias) for segments, alias in results if segments]


_PATH = re.compile(r"(?<![\w:])(\w+)((?:\s*::\s*(?:\w+|\{))+)")


def _paths(code):
    """(offset, segments) of every path in code: `use` trees expanded, expressions as written."""
    for m in _PATH.finditer(code):
        if m.group(2).rstrip().endswith("{"):
            # A use tree with braces: read to its matching brace.
            depth, j = 0, m.start()
            while j < len(code):
                if code[j] == "{":
                    depth += 1
                elif code[j] == "}":
                    depth -= 1
                    if depth == 0:
                        j += 1
                        break
                elif code[j] in ";" and depth == 0:
                    break
                j += 1
            for segments, _ in _use_tree(code[m.start():j]):
                yield m.start(), segments
        else:
            yield m.start(), [s.strip() for s in (m.group(1) + m.group(2)).split("::")]


def top_level(rel):
    """The top-level module a file belongs to (`engine/cell.rs` → `engine`, `home.rs` → `home`)."""
    return rel.split("/")[0].removesuffix(".rs")


def cycles(edges):
    """Each strongly connected component of more than one node: (its members, one cycle in it)."""
    graph = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    index, low, stack, on_stack, components = {}, {}, [], set(), []

    def connect(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(component)

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            connect(v)
    return [(sorted(component), _one_cycle(graph, component)) for component in components]


def _one_cycle(graph, component):
    """A shortest cycle through the component's first node, as a list of nodes."""
    first = min(component)
    paths, seen = [[first]], {first}
    while paths:
        path = paths.pop(0)
        for w in sorted(graph[path[-1]] & component):
            if w == first:
                return path + [first]
            if w not in seen:
                seen.add(w)
                paths.append(path + [w])
    return [first, first]


def find_cycles(src):
    """Each cycle as (kind, its component's members, [(from, to, "file:line"), ...])."""
    crate = Crate(src)
    module_edges, file_edges = {}, {}
    for rel, line, target in crate.references():
        a, b = top_level(rel), top_level(target)
        if a != b and rel != "lib.rs":
            module_edges.setdefault((a, b), f"src/{rel}:{line}")
        if a in FILE_LEVEL and b in FILE_LEVEL:
            file_edges.setdefault((rel, target), f"src/{rel}:{line}")
    found = []
    for kind, edges in (("modules", module_edges), ("files", file_edges)):
        for members, cycle in cycles(edges):
            found.append((kind, members, [(a, b, edges[a, b]) for a, b in zip(cycle, cycle[1:])]))
    return found


def main(src):
    found = find_cycles(src)
    for kind, members, steps in found:
        names = " -> ".join([steps[0][0]] + [b for _, b, _ in steps])
        print(f"error: import cycle between {kind}: {names}", file=sys.stderr)
        for a, b, where in steps:
            print(f"  {a} -> {b}  ({where})", file=sys.stderr)
        if len(members) > len(steps):
            print(f"  (one cycle of several among: {', '.join(members)})", file=sys.stderr)
    if found:
        print("hint: move what both sides need below them (or invert the edge with a trait the "
              "lower module owns); the graph is scripts/import_cycles.py's", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent / "src"))
