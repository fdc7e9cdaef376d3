"""Load helper files into the user's namespace, and describe them without running them.

A *helper* is one ``*.py`` file (the format is documented for users in ``docs/helpers.md``):

- ``helper_description = "one line"`` at module level is its summary (the older name
  ``function_description`` is accepted too; ``helper_description`` wins when both are set);
- its *public names* are bound into the user's namespace: exactly the names in ``__all__`` if the
  file defines one, otherwise every function defined in the file (not imported) whose name does
  not start with ``_``;
- its module-level code runs in its own module, ``pi_repl_helpers.<stem>``, never in the user's
  namespace, so a helper's imports and private globals do not leak.

What this module owns: executing one helper file (``load``), choosing and binding its public
names, reporting what happened as plain JSON-serialisable data, remembering every load of this
process (``loaded``), and a static description of a file that never executes it
(``describe_file``). What it does not own: finding helper files, the shadowing rules, skipping
``_``-prefixed files, the tool description (all in the Rust host).

Invariants:

- ``load`` never raises. Whatever the file does at import (``SyntaxError``, ``ImportError``, any
  exception, ``sys.exit()``, even a ``KeyboardInterrupt`` from the host interrupting a helper that
  hangs) becomes the record's ``"error"``; the kernel carries on. Only a helper that ends the
  process itself (``os._exit``, a crash in C) cannot be reported.
- Nothing is bound unless the file ran to its end and its ``__all__`` (if any) names only things
  it defines; then every public name is bound in one ``dict.update``.
- A loaded helper is ``sys.modules["pi_repl_helpers.<stem>"]`` (a child of the package-like module
  ``pi_repl_helpers``), so its functions pickle by reference and ``inspect.getsource`` works. The
  source it executed is pinned in ``linecache``, so tracebacks and ``getsource`` show the code that
  runs even if the file changes on disk later.
- A record's signatures are ``str(inspect.signature(obj))`` of the loaded objects;
  ``describe_file`` renders the same text from the AST wherever the AST allows (see its docstring).
"""

import ast
import copy
import importlib.machinery
import importlib.util
import inspect
import linecache
import os
import re
import sys
import traceback
import types

PACKAGE = "pi_repl_helpers"
"""Name of the package-like module whose children are the loaded helpers."""

DESCRIPTION_NAMES = ("helper_description", "function_description")
"""Module-level names read as a helper's one-line summary, in order of preference."""

_records = {}  # absolute path -> the latest record `load` returned for it, in load order
_bound = {}  # name -> module name of the helper that bound it last


def load(path, namespace=None):
    """Execute the helper file at ``path`` in its own module and bind its public names.

    ``namespace`` defaults to the IPython user namespace (``get_ipython().user_ns``). Returns a
    JSON-serialisable record::

        {"file": path, "module": "pi_repl_helpers.<stem>", "summary": str | None,
         "functions": [{"name": str, "signature": str | None, "summary": str | None}, ...],
         "error": None | {"type": str, "message": str, "line": int | None,
                          "traceback": [str, ...], "text": str}}

    ``functions`` lists the bound names in file order (``__all__`` order if it has one).
    ``signature`` is ``str(inspect.signature(obj))`` (``None`` for a non-callable name from
    ``__all__``); ``summary`` is the first line of the docstring. On error nothing is bound,
    ``functions`` is empty, and ``error.traceback`` holds only the frames inside the helper file
    (the loader's own frames are dropped); ``error.text`` is the same, ready to print. Never
    raises (see the module docstring). Loading a file whose stem is already loaded replaces that
    module (its earlier bindings stay until overwritten). A dot in the stem becomes ``_`` in the
    module name.
    """
    file = os.fspath(path)
    full = os.path.abspath(os.path.expanduser(file))
    module_name = f"{PACKAGE}.{_stem(full)}"
    record = _new_record(file, module_name)
    try:
        if namespace is None:
            namespace = _user_namespace()
        module = _execute(full, module_name)
        bindings = _public_names(module)
        record["summary"] = _summary_of(module.__dict__)
        record["functions"] = [_describe_object(name, obj) for name, obj in bindings.items()]
        namespace.update(bindings)
        _hide_from_who(namespace, bindings)
    except BaseException as error:  # noqa: BLE001 - load never raises; see the module docstring
        record["summary"] = None
        record["functions"] = []
        record["error"] = _describe_error(error, full)
    else:
        for name in bindings:
            _bound[name] = module_name
    _records.pop(full, None)
    _records[full] = record
    return copy.deepcopy(record)


def loaded():
    """Everything ``load`` did in this process, for the tool description and ``pi-repl doctor``.

    Returns ``{"helpers": [record, ...], "names": {name: module}}``: ``helpers`` holds the latest
    record of every file passed to ``load``, in the order they were (last) loaded, failed ones
    included; ``names`` maps every name a successful load bound to the module that bound it last
    (the names the host should treat as helpers, e.g. keep out of snapshots). A fresh copy.
    """
    return {"helpers": copy.deepcopy(list(_records.values())), "names": dict(_bound)}


def describe_file(path):
    """Describe a helper file without executing it: the same record shape as ``load``.

    Read from the AST: the summary (a string literal assigned to ``helper_description`` or
    ``function_description``), ``__all__`` (a literal list or tuple of strings; a computed one is
    not seen, and the public functions are listed instead), and the public
    top-level ``def``/``async def`` (also inside top-level ``if``/``try``/``with`` blocks) and
    ``name = lambda ...`` bindings. Signatures are rendered as ``inspect.signature`` renders them:
    positional-only ``/``, keyword-only ``*``, ``*args``, ``**kwargs``, annotations and defaults,
    however many lines the ``def`` spans. Where the AST cannot know the runtime value the text
    may differ from ``load``'s: a non-literal default is shown as written (``os.sep`` rather than
    ``'/'``), a decorator that changes the signature is not seen, and an annotation's qualified
    name is inferred from the file's ``from X import Y`` lines. A class named in ``__all__`` gets
    the signature of its own ``__init__`` (``None`` when it has none); any other name in
    ``__all__`` that is not a top-level ``def`` gets ``None``.

    Only a file that cannot be read or parsed is an ``"error"``; problems that appear when the
    file runs (an ``ImportError``, an exception) are found by ``load`` only.
    """
    file = os.fspath(path)
    full = os.path.abspath(os.path.expanduser(file))
    module_name = f"{PACKAGE}.{_stem(full)}"
    record = _new_record(file, module_name)
    try:
        with open(full, "rb") as handle:
            tree = ast.parse(handle.read(), filename=full)
    except Exception as error:  # noqa: BLE001 - any unreadable or unparsable file is reported
        record["error"] = _describe_error(error, full)
        return record
    record["summary"], exported, functions = _scan_module(tree)
    context = _AnnotationContext(tree, module_name)
    if exported is None:
        names = [name for name in functions if not name.startswith("_")]
    else:
        names = exported
    for name in names:
        node = functions.get(name)
        if node is None:
            record["functions"].append({"name": name, "signature": None, "summary": None})
        else:
            record["functions"].append(_describe_node(name, node, context))
    return record


# --- loading -------------------------------------------------------------------------------


def _stem(full):
    """The file name without ``.py``; dots become ``_`` (a dot would mean a sub-package)."""
    return os.path.splitext(os.path.basename(full))[0].replace(".", "_")


def _new_record(file, module_name):
    return {"file": file, "module": module_name, "summary": None, "functions": [], "error": None}


def _user_namespace():
    try:
        from IPython import get_ipython
    except ImportError:
        get_ipython = lambda: None  # noqa: E731 - the error below explains it
    shell = get_ipython()
    if shell is None:
        raise RuntimeError("no IPython kernel is running here: pass namespace= explicitly")
    return shell.user_ns


def _hide_from_who(namespace, bindings):
    """Keep helpers out of ``%who``/``%whos``, as IPython keeps its own names: they are the
    workspace's tools, not the user's variables. IPython hides a name only while it still holds
    the hidden object, so a helper the user redefines shows again."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is not None and namespace is shell.user_ns:
        shell.user_ns_hidden.update(bindings)


def _package():
    """The package-like parent of every helper module, created on first use."""
    package = sys.modules.get(PACKAGE)
    if package is None:
        package = types.ModuleType(PACKAGE, "Helper files loaded by pi_repl_kernel.helpers.")
        package.__path__ = []  # a package: `pi_repl_helpers.<stem>` resolves through sys.modules
        package.__spec__ = importlib.machinery.ModuleSpec(PACKAGE, None, is_package=True)
        sys.modules[PACKAGE] = package
    return package


def _execute(full, module_name):
    """Run the file in a new module registered as ``module_name``; unregister it on error."""
    with open(full, "rb") as handle:
        raw = handle.read()
    source = importlib.util.decode_source(raw)  # honours a PEP 263 coding line, like import
    code = compile(raw, full, "exec", dont_inherit=True)
    # Pin the executed source: tracebacks and inspect.getsource then show what actually runs.
    # An mtime of None tells linecache.checkcache never to replace the entry from disk.
    linecache.cache[full] = (len(source), None, source.splitlines(keepends=True), full)

    loader = importlib.machinery.SourceFileLoader(module_name, full)
    module = types.ModuleType(module_name)
    module.__file__ = full
    module.__loader__ = loader
    module.__spec__ = importlib.util.spec_from_file_location(module_name, full, loader=loader)
    module.__package__ = PACKAGE
    package = _package()
    stem = module_name.rpartition(".")[2]
    previous = sys.modules.get(module_name)
    # Registered before running, as import does: dataclasses, pickling and typing look it up.
    sys.modules[module_name] = module
    try:
        exec(code, module.__dict__)
    except BaseException:
        if previous is None:
            sys.modules.pop(module_name, None)
        else:
            sys.modules[module_name] = previous
        raise
    setattr(package, stem, module)
    return module


def _public_names(module):
    """The names to bind: ``__all__`` exactly, else the public functions defined in the file."""
    values = module.__dict__
    if "__all__" in values:
        exported = values["__all__"]
        if isinstance(exported, str) or not all(isinstance(name, str) for name in exported):
            raise TypeError("__all__ must be a list of names (strings)")
        missing = [name for name in exported if name not in values]
        if missing:
            names = ", ".join(map(repr, missing))
            raise AttributeError(f"__all__ names {names} but the helper defines no such name")
        return {name: values[name] for name in exported}
    return {
        name: value
        for name, value in values.items()
        if not name.startswith("_")
        and inspect.isfunction(value)
        and value.__module__ == module.__name__
    }


def _summary_of(values):
    for name in DESCRIPTION_NAMES:
        text = values.get(name)
        if isinstance(text, str) and text.strip():
            return _one_line(text)
    return None


def _one_line(text):
    """Collapse whitespace: a multi-line description still reads as one line."""
    return " ".join(text.split())


def _first_line(doc):
    if not isinstance(doc, str):
        return None
    for line in inspect.cleandoc(doc).splitlines():
        if line.strip():
            return line.strip()
    return None


def _describe_object(name, obj):
    signature = None
    if callable(obj):
        try:
            signature = str(inspect.signature(obj))
        except (TypeError, ValueError):
            signature = None  # a builtin or C callable without introspectable parameters
    summary = None
    if inspect.isroutine(obj) or inspect.isclass(obj):
        summary = _first_line(getattr(obj, "__doc__", None))
    return {"name": name, "signature": signature, "summary": summary}


def _describe_error(error, full):
    """The exception as data: type, message, helper line, and the frames inside the helper."""
    kind = type(error)
    qualified = kind.__qualname__
    if kind.__module__ not in ("builtins", "__main__"):
        qualified = f"{kind.__module__}.{qualified}"
    message = str(error)
    line = None
    location = []
    in_helper_syntax = isinstance(error, SyntaxError) and _same_file(error.filename, full)
    if in_helper_syntax:
        message = error.msg or message
        line = error.lineno
        # format_exception_only gives the File/line, the code and the caret, then the message.
        formatted = "".join(traceback.format_exception_only(kind, error))
        location = formatted.rstrip("\n").split("\n")[:-1]
    else:
        frames = [
            frame
            for frame in traceback.extract_tb(error.__traceback__)
            if _same_file(frame.filename, full)
        ]
        if frames:
            line = frames[-1].lineno
            formatted = traceback.StackSummary.from_list(frames).format()
            location = "".join(formatted).rstrip("\n").split("\n")
    if isinstance(error, SystemExit):
        message = f"the helper called sys.exit({error.code!r}) while loading"
    elif isinstance(error, KeyboardInterrupt) and not message:
        message = "interrupted while loading (does its module-level code wait for something?)"
    last = f"{qualified}: {message}"
    if in_helper_syntax:
        text = "\n".join(location + [last])
    elif location:
        text = "\n".join(["Traceback (most recent call last):"] + location + [last])
    else:
        text = f"{last} (in {full})"
    return {
        "type": qualified,
        "message": message,
        "line": line,
        "traceback": location,
        "text": text,
    }


def _same_file(filename, full):
    return isinstance(filename, str) and os.path.abspath(filename) == full


# --- static description ----------------------------------------------------------------------


def _scan_module(tree):
    """Summary, ``__all__`` (or None) and the top-level function nodes by name, in file order."""
    summary = None
    summaries = {}
    exported = None
    functions = {}
    for node in _top_level(tree.body):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            functions[node.name] = node
            continue
        targets, value = _assignment(node)
        for target in targets:
            if not isinstance(target, ast.Name):
                continue
            name = target.id
            if name in DESCRIPTION_NAMES and _is_string(value):
                summaries[name] = value.value
            elif name == "__all__":
                exported = _literal_names(value)
            elif isinstance(value, ast.Lambda):
                functions[name] = value
            elif name in functions:
                del functions[name]  # rebound to something else later in the file
    for name in DESCRIPTION_NAMES:
        text = summaries.get(name)
        if text is not None and text.strip():
            summary = _one_line(text)
            break
    # A class is only ever bound when __all__ names it: keep classes for that lookup alone.
    if exported is None:
        functions = {k: v for k, v in functions.items() if not isinstance(v, ast.ClassDef)}
    return summary, exported, functions


def _top_level(statements):
    """Module-level statements, descending into ``if``/``try``/``with`` blocks (not defs)."""
    for node in statements:
        yield node
        if isinstance(node, ast.If):
            yield from _top_level(node.body)
            yield from _top_level(node.orelse)
        elif isinstance(node, ast.Try) or type(node).__name__ == "TryStar":
            yield from _top_level(node.body)
            for handler in node.handlers:
                yield from _top_level(handler.body)
            yield from _top_level(node.orelse)
            yield from _top_level(node.finalbody)
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            yield from _top_level(node.body)


def _assignment(node):
    if isinstance(node, ast.Assign):
        return node.targets, node.value
    if isinstance(node, ast.AnnAssign) and node.value is not None:
        return [node.target], node.value
    return [], None


def _is_string(node):
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def _literal_names(node):
    if isinstance(node, (ast.List, ast.Tuple)) and all(_is_string(item) for item in node.elts):
        return [item.value for item in node.elts]
    return None  # computed __all__: unknown statically, so fall back to the public defs


class _AnnotationContext:
    """What the AST tells about names used in annotations, to qualify them like inspect does."""

    def __init__(self, tree, module_name):
        self.future_annotations = False
        self.origins = {}  # bare name -> "module.name" it was imported as
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                if node.module == "__future__":
                    if any(alias.name == "annotations" for alias in node.names):
                        self.future_annotations = True
                    continue
                if node.module in ("typing", "typing_extensions"):
                    continue  # inspect drops the "typing." prefix
                for alias in node.names:
                    self.origins[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        for node in _top_level(tree.body):
            if isinstance(node, ast.ClassDef):
                self.origins[node.name] = f"{module_name}.{node.name}"

    def render(self, node):
        text = ast.unparse(node)
        if self.future_annotations:
            return repr(text)  # the annotation is the string itself
        if _is_string(node):
            return text
        qualified = _Qualify(self.origins).visit(copy.deepcopy(node))
        text = ast.unparse(qualified)
        return re.sub(r"[\w.]+", lambda match: match.group().removeprefix("typing."), text)


class _Qualify(ast.NodeTransformer):
    def __init__(self, origins):
        self.origins = origins

    def visit_Name(self, node):
        origin = self.origins.get(node.id)
        return ast.Name(id=origin, ctx=node.ctx) if origin else node


def _describe_node(name, node, context):
    if isinstance(node, ast.Lambda):
        signature = _render_signature(node.args, None, context)
        return {"name": name, "signature": signature, "summary": None}
    summary = _first_line(ast.get_docstring(node, clean=False))
    if isinstance(node, ast.ClassDef):
        signature = None
        for item in node.body:
            is_function = isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
            if is_function and item.name == "__init__":  # the last one wins, as at runtime
                signature = _render_signature(item.args, item.returns, context, skip_first=True)
        return {"name": name, "signature": signature, "summary": summary}
    signature = _render_signature(node.args, node.returns, context)
    return {"name": name, "signature": signature, "summary": summary}


def _render_default(node):
    try:
        return repr(ast.literal_eval(node))
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return ast.unparse(node)  # not a literal: shown as written


def _render_parameter(arg, default, context, prefix=""):
    text = prefix + arg.arg
    annotated = arg.annotation is not None
    if annotated:
        text += ": " + context.render(arg.annotation)
    if default is not None:
        text += (" = " if annotated else "=") + _render_default(default)
    return text


def _render_signature(arguments, returns, context, skip_first=False):
    """Render ``ast.arguments`` exactly as ``str(inspect.Signature)`` lays parameters out."""
    positional = list(arguments.posonlyargs) + list(arguments.args)
    defaults = [None] * (len(positional) - len(arguments.defaults)) + list(arguments.defaults)
    kinds = ["positional_only"] * len(arguments.posonlyargs) + ["positional"] * len(arguments.args)
    params = [
        (kind, _render_parameter(arg, default, context))
        for kind, arg, default in zip(kinds, positional, defaults)
    ]
    if skip_first and params:
        params = params[1:]
    if arguments.vararg is not None:
        params.append(("var_positional", _render_parameter(arguments.vararg, None, context, "*")))
    for arg, default in zip(arguments.kwonlyargs, arguments.kw_defaults):
        params.append(("keyword_only", _render_parameter(arg, default, context)))
    if arguments.kwarg is not None:
        params.append(("var_keyword", _render_parameter(arguments.kwarg, None, context, "**")))

    # The separators, as inspect.Signature.__str__ places them.
    result = []
    pending_slash = False
    star_needed = True
    for kind, text in params:
        if kind == "positional_only":
            pending_slash = True
        elif pending_slash:
            result.append("/")
            pending_slash = False
        if kind == "var_positional":
            star_needed = False
        elif kind == "keyword_only" and star_needed:
            result.append("*")
            star_needed = False
        result.append(text)
    if pending_slash:
        result.append("/")
    rendered = "(" + ", ".join(result) + ")"
    if returns is not None:
        rendered += " -> " + context.render(returns)
    return rendered
