"""pi-repl default helper: ``edit``.

A helper file like any user's (see docs/helpers.md); the file handling it shares with ``read``,
``write`` and ``bash`` (path policy, regular-file check, atomic writer) is in
``pi_repl_kernel.toolbox_support``.
"""

import bisect
import difflib
import os
import re
import stat

from pi_repl_kernel import toolbox_support as _io

helper_description = (
    "Replace exact text in a file (one change, or edits=[(old, new), ...] all or none); "
    "returns a unified diff."
)

MAX_DIFF_LINES = 200
"""Longest diff ``edit`` returns; a longer one is cut and says how many lines were left out."""

CONTEXT_LINES = 3
"""Unchanged lines shown around each change in the diff."""

_SHOWN_OCCURRENCES = 20  # occurrences listed in an "ambiguous" error
_SHOWN_CANDIDATES = 3  # near matches shown in a "not found" error
_CANDIDATE_LINES = 12  # lines shown of each near match
_SIMILAR_ENOUGH = 0.5  # a near match below this similarity is not worth showing

_FOLD = str.maketrans(  # typographic characters matched as their plain forms (like pi's edit)
    {
        **dict.fromkeys("\u2018\u2019\u201a\u201b", "'"),
        **dict.fromkeys("\u201c\u201d\u201e\u201f", '"'),
        **dict.fromkeys("\u2010\u2011\u2012\u2013\u2014\u2015\u2212", "-"),
        **dict.fromkeys("\u00a0\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
                        "\u202f\u205f\u3000", " "),
    }
)
_TRAILING = re.compile(r"[ \t]+(?=\r?\n|\Z)")
_NUMBER_PREFIX = re.compile(r"^ *\d+(?:\t|\u2192)", re.MULTILINE)  # read()'s "  12\t" (or "12→")


def edit(path, old=None, new=None, count=1, *, edits=None, force=False):
    """Replace ``old`` with ``new`` in the file at ``path`` (or apply ``edits``); return the diff.

    Arguments:
        path: an existing text file (UTF-8); relative to the kernel's current directory.
        old: the text to find, exactly (whitespace, indentation and line breaks included), as
            ``read()`` shows it without the line-number prefixes.
        new: the replacement text (may be empty, to delete ``old``).
        count: how many occurrences ``old`` must have: ``1`` (the default) means exactly one, so
            an edit never lands in the wrong place; ``N`` means exactly N, all replaced; ``None``
            (or ``-1``) means every occurrence, at least one.
        edits: instead of ``old``/``new``, several changes at once: ``[(old, new), ...]``. Each
            ``old`` must occur exactly once in the file as it was before the call, and they must
            not overlap. They are applied together or not at all: if one fails, the file is
            left unchanged and the error says which one.
        force: edit a read-only file anyway (it stays read-only).

    Matching: the exact text first. If the file has CRLF line ends and ``old`` plain ``\n``,
    ``old`` and ``new`` are matched and written with CRLF. If there is no exact match, these
    tolerances are tried, in order, and the diff's first line says which one was used (never a
    silent fuzzy replace): line-number prefixes pasted from ``read()`` (``"  12\t"``) are removed
    from ``old`` (and from ``new`` when every line of it has one); trailing spaces and tabs at
    line ends are ignored; typographic quotes, dashes and special spaces match their plain forms.
    Different indentation is never tolerated (the error shows the exact text, with ``repr``).

    Returns a unified diff of just the changed lines (``CONTEXT_LINES`` around each change, at
    most ``MAX_DIFF_LINES`` lines). When a change is only in line ends, they are shown (``␍␊``
    CRLF, ``␊`` LF).

    The file is rewritten atomically (temporary file, fsync, rename) and keeps its mode, owner
    and extended attributes; it must be inside the directories the session may write (see
    ``write``).

    Raises:
        ValueError: ``old`` is not in the file (the message shows the nearest candidate lines,
            with line numbers and what differs, and says when only whitespace differs); ``old``
            occurs a different number of times than ``count`` requires (the message lists the
            line of each occurrence); ``old`` is empty or equal to ``new``; two ``edits``
            overlap; the file is binary, a FIFO or a device. The message of an ``edits`` failure
            starts with ``edits[i]``; nothing was changed.
        FileNotFoundError: no such file (similar names are suggested; create files with
            ``write``). IsADirectoryError: ``path`` is a directory.
        PermissionError: outside the writable directories, or read-only without ``force``.

    Examples::

        edit("app.py", "DEBUG = True", "DEBUG = False")
        edit("app.py", "    return x\n", "    return x + 1\n")
        edit("notes.md", "TODO", "DONE", count=None)     # every occurrence
        edit("app.py", edits=[("import os", "import os, sys"), ("x = 1", "x = 2")])
    """
    full = _io.resolve(path)
    pairs = _pairs(old, new, count, edits)
    target = _io.check_write_allowed(full, "edit")
    try:
        text, info = _io.read_text(target, "edit")
    except FileNotFoundError:
        raise FileNotFoundError(
            f"No such file: {full}. {_io.near_names(full)} "
            f"To create a file, use write(path, content)."
        ) from None
    if not force and (not info.st_mode & 0o222 or not os.access(target, os.W_OK)):
        raise PermissionError(
            f"{full} is read-only (mode {stat.filemode(info.st_mode)}); edit() leaves it alone. "
            f"Pass force=True to change it anyway (it stays read-only)."
        )

    changes, notes = [], []
    for index, (one_old, one_new, wanted) in enumerate(pairs):
        label = f"edits[{index}]: " if edits is not None else ""
        try:
            spans, replacement, note = _match(full, text, one_old, one_new, wanted)
        except ValueError as error:
            if edits is None:
                raise
            raise ValueError(
                f"{label}{error}\nNothing was changed: edits are applied all or none."
            ) from None
        changes += [(start, end, replacement, index) for start, end in spans]
        if note:
            notes.append(f"[{label}{note}]")
    changes.sort()
    for (a_start, a_end, _, a), (b_start, _, _, b) in zip(changes, changes[1:]):
        if b_start < a_end:
            raise ValueError(
                f"edits[{a}] and edits[{b}] overlap at line {_line_of(text, b_start)} of {full}: "
                f"merge them into one edit. Nothing was changed."
            )
    pieces, position = [], 0
    for start, end, replacement, _ in changes:
        pieces += [text[position:start], replacement]
        position = end
    pieces.append(text[position:])
    updated = "".join(pieces)
    if updated == text:
        raise ValueError(f"the edit leaves {full} as it is: there is nothing to change")
    _io.replace_file(target, updated.encode("utf-8"), stat.S_IMODE(info.st_mode), like=info)
    diff = _diff(full, text, changes)
    return _io.Text("\n".join(notes) + ("\n" if notes else "") + diff)


def _pairs(old, new, count, edits):
    """``[(old, new, wanted count), ...]`` from either calling form, checked."""
    if edits is not None:
        if old is not None or new is not None:
            raise TypeError("edit() takes either old and new, or edits=[(old, new), ...]: not both")
        if isinstance(edits, (str, bytes)) or not hasattr(edits, "__iter__"):
            raise TypeError("edits must be a list of (old, new) pairs")
        pairs = []
        for index, item in enumerate(edits):
            if isinstance(item, dict):
                item = (item.get("old"), item.get("new"))
            if not isinstance(item, (tuple, list)) or len(item) != 2:
                raise TypeError(f"edits[{index}] must be an (old, new) pair, got {item!r}")
            pairs.append((item[0], item[1], 1))
        if not pairs:
            raise ValueError("edits is empty: give at least one (old, new) pair")
    else:
        if old is None or new is None:
            raise TypeError("edit() needs old and new (or edits=[(old, new), ...])")
        pairs = [(old, new, _wanted(count))]
    for index, (one_old, one_new, _) in enumerate(pairs):
        label = f"edits[{index}]: " if edits is not None else ""
        if not isinstance(one_old, str) or not isinstance(one_new, str):
            raise TypeError(f"{label}edit() takes old and new as str")
        if one_old == "":
            raise ValueError(
                f"{label}old is empty: give the exact text to replace "
                "(to insert, include a neighbouring line in both old and new)"
            )
        if one_old == one_new:
            raise ValueError(f"{label}old and new are the same: there is nothing to change")
    return pairs


def _match(full, text, old, new, wanted):
    """Where ``old`` is in ``text``: ``([(start, end), ...], replacement, note or None)``.

    Exact first (with the file's CRLF line ends if ``old`` has plain ones), then the documented
    tolerances; raises ValueError (nearest text, or the occurrences) when nothing fits.
    """
    attempts = [(old, new, None)]
    if _NUMBER_PREFIX.match(old) and all(
        _NUMBER_PREFIX.match(line) for line in old.splitlines() if line.strip()
    ):
        bare_old = _NUMBER_PREFIX.sub("", old)
        numbered_new = all(_NUMBER_PREFIX.match(line) for line in new.splitlines() if line.strip())
        bare_new = _NUMBER_PREFIX.sub("", new) if new and numbered_new else new
        attempts.append((bare_old, bare_new, "line-number prefixes (as read() shows them) removed"))
    crlf = "\r\n" in text
    for one_old, one_new, note in attempts:
        for candidate_old, candidate_new in _with_line_ends(crlf, one_old, one_new):
            spans = [(s, s + len(candidate_old)) for s in _find_all(text, candidate_old)]
            if spans:
                _check_count(full, text, candidate_old, spans, wanted)
                return spans, candidate_new, note and f"No exact match; {note}."
    for one_old, one_new, note in attempts:
        for candidate_old, candidate_new in _with_line_ends(crlf, one_old, one_new):
            spans, kinds = _tolerant(text, candidate_old)
            if spans:
                _check_count(full, text, candidate_old, spans, wanted)
                used = "; ".join(filter(None, [note, *kinds]))
                lines = _join(sorted({_line_of(text, s) for s, _ in spans}))
                return spans, candidate_new, f"No exact match; matched at line {lines} with {used}."
    raise ValueError(_not_found(full, text, old))


def _with_line_ends(crlf, old, new):
    yield old, new
    if crlf and "\n" in old and "\r\n" not in old:
        yield old.replace("\n", "\r\n"), new if "\r\n" in new else new.replace("\n", "\r\n")


def _check_count(full, text, old, spans, wanted):
    if wanted is not None and len(spans) != wanted:
        raise ValueError(_wrong_count(full, text, old, [s for s, _ in spans], wanted))


def _tolerant(text, old):
    """Spans of ``text`` matching ``old`` when trailing whitespace is ignored and typographic
    quotes, dashes and spaces are folded; ``(spans in text, [tolerances used])``."""
    folded_old = _TRAILING.sub("", old.translate(_FOLD))
    if not folded_old.strip():
        return [], []
    folded, positions, removed = _fold(text)
    spans = []
    for start in _find_all(folded, folded_old):
        end = start + len(folded_old)
        spans.append((_original(start, positions, removed), _original(end, positions, removed)))
    if not spans:
        return [], []
    kinds = []
    regions = [text[s:e] for s, e in spans]
    if old.translate(_FOLD) != old or any(r.translate(_FOLD) != r for r in regions):
        kinds.append("typographic quotes, dashes or spaces matched as plain ones")
    if _TRAILING.search(old) or any(_TRAILING.search(r) for r in regions):
        kinds.append("trailing whitespace ignored")
    return spans, kinds


def _fold(text):
    """``text`` folded (typographic characters, trailing whitespace removed), and the map back:
    the folded positions where whitespace was removed, and how much had been removed by each."""
    translated = text.translate(_FOLD)
    pieces, positions, removed, last, total = [], [], [], 0, 0
    for match in _TRAILING.finditer(translated):
        pieces.append(translated[last : match.start()])
        total += match.end() - match.start()
        positions.append(match.start() - (total - (match.end() - match.start())))
        removed.append(total)
        last = match.end()
    pieces.append(translated[last:])
    return "".join(pieces), positions, removed


def _original(folded_index, positions, removed):
    """The position in the original text of a position in the folded text (whitespace removed
    just before it counts as inside the span, so a replaced line loses its trailing blanks)."""
    k = bisect.bisect_right(positions, folded_index)
    return folded_index + (removed[k - 1] if k else 0)


def _find_all(text, old):
    """Start offsets of the non-overlapping occurrences, as ``str.replace`` sees them."""
    found = []
    start = text.find(old)
    while start >= 0:
        found.append(start)
        start = text.find(old, start + len(old))
    return found


def _wanted(count):
    if count is None or count == -1:
        return None
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"count must be a positive integer, or None for all; got {count!r}")
    return count


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


def _diff(full, before, changes):
    """A unified diff of just the changed regions: each group of nearby changes becomes one
    hunk, computed on its own lines only (a 10 MB file is never diffed whole)."""
    groups = []
    for start, end, replacement, _ in changes:
        first = before.rfind("\n", 0, start) + 1
        last_end = before.find("\n", max(start, end - 1))
        last_end = len(before) if last_end < 0 else last_end + 1
        first, last_end = _widen(before, first, last_end, CONTEXT_LINES)
        if groups and first <= groups[-1][1]:
            groups[-1][1] = max(groups[-1][1], last_end)
            groups[-1][2].append((start, end, replacement))
        else:
            groups.append([first, last_end, [(start, end, replacement)]])
    out = [f"--- a{full}", f"+++ b{full}"]
    shift = 0  # lines added minus removed by the groups before this one
    for first, last_end, group in groups:
        old_window = before[first:last_end]
        pieces, position = [], first
        for start, end, replacement in group:
            pieces += [before[position:start], replacement]
            position = end
        pieces.append(before[position:last_end])
        new_window = "".join(pieces)
        old_lines = old_window.splitlines(keepends=True)
        new_lines = new_window.splitlines(keepends=True)
        base = before.count("\n", 0, first)
        hunk = list(difflib.unified_diff(old_lines, new_lines, n=CONTEXT_LINES, lineterm=""))[2:]
        removed = {line[1:].rstrip("\r\n") for line in hunk if line.startswith("-")}
        added = {line[1:].rstrip("\r\n") for line in hunk if line.startswith("+")}
        show_ends = bool(removed & added)
        for line in hunk:
            if line.startswith("@@"):
                out.append(_shift_header(line, base, base + shift))
            else:
                out.append(_shown_line(line, show_ends))
        shift += len(new_lines) - len(old_lines)
    if any("\u240a" in line for line in out):
        out.insert(2, "(line ends shown: \u240d\u240a = CRLF, \u240a = LF)")
    if len(out) > MAX_DIFF_LINES:
        left_out = len(out) - MAX_DIFF_LINES
        note = f"... ({left_out} more diff lines; read the file to see the rest)"
        out = out[:MAX_DIFF_LINES] + [note]
    return "\n".join(out) + "\n"


def _widen(text, first, last_end, lines):
    """Extend a region of whole lines by ``lines`` lines of context each side."""
    for _ in range(lines):
        if first > 0:
            first = text.rfind("\n", 0, first - 1) + 1
        if last_end < len(text):
            found = text.find("\n", last_end)
            last_end = len(text) if found < 0 else found + 1
    return first, last_end


_HEADER = re.compile(r"^@@ -(\d+)(,\d+)? \+(\d+)(,\d+)? @@")


def _shift_header(line, old_base, new_base):
    match = _HEADER.match(line)
    if not match:
        return line
    old_start, new_start = int(match.group(1)) + old_base, int(match.group(3)) + new_base
    return f"@@ -{old_start}{match.group(2) or ''} +{new_start}{match.group(4) or ''} @@"


def _shown_line(line, show_ends):
    if line.endswith("\r\n"):
        body, end = line[:-2], "\u240d\u240a"
    elif line.endswith("\n") or line.endswith("\r"):
        body, end = line[:-1], "\u240a" if line.endswith("\n") else "\u240d"
    else:
        body, end = line, ""
    return body + end if show_ends else body


def _shown(first, last):
    """Line numbers of a candidate to print: at most ``_CANDIDATE_LINES`` of them."""
    return range(first, min(last, first + _CANDIDATE_LINES - 1) + 1)


def _range(first, last):
    return f" {first}" if first == last else f"s {first}-{last}"


def _join(numbers):
    return ", ".join(map(str, numbers))


def _clip(line, width=200):
    return line if len(line) <= width else line[: width - 3] + "..."
