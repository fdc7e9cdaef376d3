"""pi-repl default helper: ``edit``.

A helper file like any user's (see docs/helpers.md): it is self-contained (standard library
only, no import of the other toolbox files), so a user can copy or replace it on its own. The
atomic write below is therefore a copy of the one in ``write.py``, on purpose.
"""

import bisect
import difflib
import os
import stat

from pi_repl_kernel.toolbox_support import Text as _Text
from pi_repl_kernel.toolbox_support import write_atomic as _write_atomic

helper_description = (
    "Replace an exact string in a file (exactly `count` times; None = all); returns a unified diff."
)

MAX_DIFF_LINES = 200
"""Longest diff ``edit`` returns; a longer one is cut and says how many lines were left out."""

_SHOWN_OCCURRENCES = 20  # occurrences listed in an "ambiguous" error
_SHOWN_CANDIDATES = 3  # near matches shown in a "not found" error
_CANDIDATE_LINES = 12  # lines shown of each near match
_SIMILAR_ENOUGH = 0.5  # a near match below this similarity is not worth showing


def edit(path, old, new, count=1):
    """Replace the exact text ``old`` with ``new`` in the file at ``path``; return the diff.

    Arguments:
        path: an existing text file (UTF-8); relative to the kernel's current directory.
        old: the text to find, exactly (whitespace, indentation and line breaks included).
            Copy it from ``read()``'s output without the line-number prefixes.
        new: the replacement text (may be empty, to delete ``old``).
        count: how many occurrences ``old`` must have: ``1`` (the default) means exactly one, so
            an edit never lands in the wrong place; ``N`` means exactly N, all replaced; ``None``
            (or ``-1``) means every occurrence, at least one.

    Returns a unified diff of the change (a ``str``, at most ``MAX_DIFF_LINES`` lines).

    The file is rewritten atomically (temporary file, fsync, rename) and keeps its permission
    bits. If the file uses CRLF line endings and ``old`` uses plain ``\\n``, ``old`` and ``new``
    are matched and written with CRLF.

    Raises:
        ValueError: ``old`` is not in the file (the message shows the nearest candidate lines,
            with line numbers and what differs, and says when only whitespace differs); ``old``
            occurs a different number of times than ``count`` requires (the message lists the
            line of each occurrence); ``old`` is empty or equal to ``new``; the file is binary.
        FileNotFoundError: no such file (similar names are suggested; create files with
            ``write``). IsADirectoryError: ``path`` is a directory.

    Examples::

        edit("app.py", "DEBUG = True", "DEBUG = False")
        edit("app.py", "    return x\\n", "    return x + 1\\n")
        edit("notes.md", "TODO", "DONE", count=None)     # every occurrence
    """
    full = os.path.abspath(os.path.expanduser(os.fspath(path)))
    if not isinstance(old, str) or not isinstance(new, str):
        raise TypeError("edit() takes old and new as str")
    if old == "":
        raise ValueError(
            "old is empty: give the exact text to replace "
            "(to insert, include a neighbouring line in both old and new)"
        )
    if old == new:
        raise ValueError("old and new are the same: there is nothing to change")
    wanted = _wanted(count)
    target = os.path.realpath(full) if os.path.islink(full) else full
    text = _read_text(full, target)

    occurrences = _find_all(text, old)
    if not occurrences and "\r\n" in text and "\n" in old and "\r\n" not in old:
        crlf_old = old.replace("\n", "\r\n")
        occurrences = _find_all(text, crlf_old)
        if occurrences:
            old = crlf_old
            new = new if "\r\n" in new else new.replace("\n", "\r\n")
    if not occurrences:
        raise ValueError(_not_found(full, text, old))
    if wanted is not None and len(occurrences) != wanted:
        raise ValueError(_wrong_count(full, text, old, occurrences, wanted))

    updated = text.replace(old, new, len(occurrences))
    _write_atomic(target, updated.encode("utf-8"), stat.S_IMODE(os.stat(target).st_mode))
    return _Text(_diff(full, text, updated))


def _wanted(count):
    if count is None or count == -1:
        return None
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"count must be a positive integer, or None for all; got {count!r}")
    return count


def _read_text(full, target):
    if os.path.isdir(target):
        raise IsADirectoryError(f"{full} is a directory; edit() changes a file")
    if not os.path.exists(target):
        raise FileNotFoundError(
            f"No such file: {full}. {_near_names(full)} To create a file, use write(path, content)."
        )
    with open(target, "rb") as handle:
        data = handle.read()
    if b"\0" in data:
        raise ValueError(f"{full} looks binary (it contains NUL bytes); edit() changes text only")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(
            f"{full} is not UTF-8 text (undecodable byte at {error.start:,}); "
            "edit() changes UTF-8 files only"
        ) from None


def _near_names(full):
    parent, name = os.path.split(full)
    try:
        entries = os.listdir(parent)
    except OSError:
        return f"The directory {parent} does not exist or cannot be listed."
    similar = difflib.get_close_matches(name, entries, n=5, cutoff=0.6)
    return f"Similar names in {parent}: {', '.join(similar)}." if similar else ""


def _find_all(text, old):
    """Start offsets of the non-overlapping occurrences, as ``str.replace`` sees them."""
    found = []
    start = text.find(old)
    while start >= 0:
        found.append(start)
        start = text.find(old, start + len(old))
    return found


def _line_of(text, offset):
    return text.count("\n", 0, offset) + 1


def _wrong_count(full, text, old, occurrences, wanted):
    numbers = [_line_of(text, offset) for offset in occurrences]
    lines = _lines(text)
    per_line = {}
    for n in numbers:
        per_line[n] = per_line.get(n, 0) + 1
    shown = list(per_line.items())[:_SHOWN_OCCURRENCES]
    listing = "\n".join(
        f"  line {n}{f' ({times} times)' if times > 1 else ''}: {_clip(lines[n - 1].strip())}"
        for n, times in shown
    )
    if len(per_line) > _SHOWN_OCCURRENCES:
        more = len(per_line) - _SHOWN_OCCURRENCES
        listing += f"\n  ... and {more} more line{'s' * (more != 1)}"
    found = len(occurrences)
    needed = "exactly one" if wanted == 1 else f"exactly {wanted}"
    return (
        f"old occurs {found} time{'s' * (found != 1)} in {full} (at line{'s' * (found != 1)} "
        f"{_join([n for n, _ in shown])}), but count={wanted} needs {needed}:\n{listing}\n"
        f"Include neighbouring lines in old to pick one, or pass count={found} "
        f"(or count=None) to replace every occurrence."
    )


def _lines(text):
    """The file's lines as ``_line_of`` numbers them (split at ``\\n`` only, line ends dropped)."""
    return [line[:-1] if line.endswith("\r") else line for line in text.split("\n")]


def _not_found(full, text, old):
    lines = _lines(text)
    message = [f"old was not found in {full} (no exact match)."]
    spaced = _whitespace_matches(lines, old)
    if spaced:
        first, last = spaced[0]
        message.append(
            f"It matches line{_range(first, last)} if whitespace is ignored: the indentation, "
            f"spacing or line breaks differ. The exact text there (repr shows tabs and "
            f"trailing spaces):"
        )
        message += [f"{n:6}\t{_clip(repr(lines[n - 1]))}" for n in _shown(first, last)]
        if len(spaced) > 1:
            others = ", line".join(_range(a, b) for a, b in spaced[1:4])
            message.append(f"Also at line{others}.")
        return "\n".join(message)

    candidates = _near_blocks(lines, old)
    if not candidates:
        message.append(
            "Nothing similar is in the file. Read it (read(path, offset, limit)) and copy the "
            "text exactly."
        )
        return "\n".join(message)
    score, first, last = candidates[0]
    message.append(f"The nearest text is line{_range(first, last)} ({score:.0%} similar):")
    message += [f"{n:6}\t{_clip(lines[n - 1])}" for n in _shown(first, last)]
    where = f"{full} (line{_range(first, last)})"
    found = lines[first - 1 : last]
    differences = list(
        difflib.unified_diff(old.splitlines(), found, "old (as given)", where, lineterm="", n=1)
    )
    if differences:
        message.append("What differs (- old as given, + the file):")
        message += [_clip(line) for line in differences[2:32]]
    if len(candidates) > 1:
        others = ", ".join(f"line{_range(a, b)} ({s:.0%})" for s, a, b in candidates[1:])
        message.append(f"Other near matches: {others}.")
    return "\n".join(message)


def _whitespace_matches(lines, old):
    """Line ranges (1-based, inclusive) where ``old`` matches once all whitespace is removed."""
    squashed_old = "".join(old.split())
    if not squashed_old:
        return []
    starts = []
    pieces = []
    offset = 0
    for line in lines:
        starts.append(offset)
        piece = "".join(line.split())
        pieces.append(piece)
        offset += len(piece)
    squashed = "".join(pieces)
    found = []
    for position in _find_all(squashed, squashed_old):
        first = bisect.bisect_right(starts, position) - 1
        last = bisect.bisect_right(starts, position + len(squashed_old) - 1) - 1
        found.append((first + 1, last + 1))
    return found


def _near_blocks(lines, old):
    """The most similar blocks of ``len(old)`` lines: ``[(similarity, first, last), ...]``.

    Candidate windows are voted for by file lines equal to a line of ``old`` (whitespace
    normalised); if no line is equal, by lines that contain most of one of ``old``'s longest
    lines. The best-voted windows are then scored with ``difflib`` against the whole of ``old``.
    """
    if not lines:
        return []
    old_lines = [" ".join(line.split()) for line in old.splitlines()] or [old.strip()]
    size = max(1, min(len(old_lines), len(lines)))
    normalised = [" ".join(line.split()) for line in lines]
    votes = {}

    def vote(line_index, old_index, weight):
        start = min(max(0, line_index - old_index), len(lines) - size)
        votes[start] = votes.get(start, 0) + weight

    positions = {}
    for old_index, line in enumerate(old_lines):
        if line:
            positions.setdefault(line, []).append(old_index)
    for index, line in enumerate(normalised):
        for old_index in positions.get(line, ()):
            vote(index, old_index, 1.0)
    if not votes:
        longest = sorted(
            (i for i, line in enumerate(old_lines) if line), key=lambda i: -len(old_lines[i])
        )[:3]
        for old_index in longest:
            matcher = difflib.SequenceMatcher(None, autojunk=False)
            matcher.set_seq2(old_lines[old_index])
            wanted = len(old_lines[old_index])
            for index, line in enumerate(normalised):
                matcher.set_seq1(line)
                if matcher.real_quick_ratio() * (len(line) + wanted) < 1.2 * wanted:
                    continue  # cannot contain 60% of the old line: skip the slow comparison
                if matcher.quick_ratio() * (len(line) + wanted) < 1.2 * wanted:
                    continue
                contained = sum(block.size for block in matcher.get_matching_blocks()) / wanted
                if contained >= 0.6:
                    vote(index, old_index, contained)

    target = "\n".join(old_lines)
    scored = []
    for start in sorted(votes, key=lambda s: -votes[s])[:12]:
        window = "\n".join(normalised[start : start + size])
        matcher = difflib.SequenceMatcher(None, window, target, autojunk=False)
        if size == 1:
            # One line of old may be part of a longer line: score how much of it is there.
            score = sum(block.size for block in matcher.get_matching_blocks()) / max(1, len(target))
            score = min(score, max(matcher.ratio(), score * 0.95))
        else:
            score = matcher.ratio()
        if score >= _SIMILAR_ENOUGH:
            scored.append((score, start + 1, start + size))
    scored.sort(key=lambda item: (-item[0], item[1]))
    chosen = []
    for score, first, last in scored:
        if all(last < a or first > b for _, a, b in chosen):
            chosen.append((score, first, last))
        if len(chosen) == _SHOWN_CANDIDATES:
            break
    return chosen


def _diff(full, before, after):
    lines = list(
        difflib.unified_diff(
            before.splitlines(), after.splitlines(), f"a{full}", f"b{full}", lineterm="", n=3
        )
    )
    if len(lines) > MAX_DIFF_LINES:
        left_out = len(lines) - MAX_DIFF_LINES
        note = f"... ({left_out} more diff lines; read the file to see the rest)"
        lines = lines[:MAX_DIFF_LINES] + [note]
    return "\n".join(lines) + "\n"


def _shown(first, last):
    """Line numbers of a candidate to print: at most ``_CANDIDATE_LINES`` of them."""
    return range(first, min(last, first + _CANDIDATE_LINES - 1) + 1)


def _range(first, last):
    return f" {first}" if first == last else f"s {first}-{last}"


def _join(numbers):
    return ", ".join(map(str, numbers))


def _clip(line, width=200):
    return line if len(line) <= width else line[: width - 3] + "..."
