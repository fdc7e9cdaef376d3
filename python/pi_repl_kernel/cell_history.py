"""Jupyter's cell history, kept small: ``_``, ``__``, ``___``, ``Out``, ``_N``, ``In``, ``_iN``.

User cells run with ``store_history=True`` (as in Jupyter), so a trailing ``;`` hides the result,
``_``/``Out``/``_N`` hold results and tracebacks say ``Cell In[N]`` with the cell's real number.
The host's own calls are *silent* cells: they store nothing and do not advance the count.

What this module bounds, after every user cell (IPython's ``post_run_cell`` event):

- ``Out``/``_oh`` and ``_N`` keep the last ``KEEP_RESULTS`` results; older ones are dropped, so a
  big result is held by at most ``KEEP_RESULTS`` later cells (``_``, ``__``, ``___`` are three of
  the last ones). IPython's own cull (with a warning printed into a cell) never fires: its
  ``cache_size`` stays far above ``KEEP_RESULTS``.
- ``_iN`` keeps the last ``KEEP_RESULTS`` inputs; older entries of ``In``/``_ih`` are blanked (the
  list keeps one shared empty string per cell, so ``In[N]`` stays cell ``N``'s source).
- IPython's per-cell record of what a cell displayed (``history_manager.outputs``) and the queue
  meant for the history database (which is off) are emptied.

IPython 9 also copies everything a cell prints into that record while the cell runs (its
``_tee``), which held every printed string until the cell ended (measured: a cell printing
200 MB of distinct lines grew the kernel by 353 MB instead of 146 MB). ``install`` turns that
copy off; the host reads output from the kernel's messages and never needed it.

``continue_at(number)`` is a host call: a rebuilt kernel continues the engine's numbering, so the
next user cell is ``In[number]``.
"""

import contextlib

KEEP_RESULTS = 10
"""Results (``Out``/``_N``) and inputs (``_iN``) kept after each cell."""

_installed = []


def install(shell):
    """Trim the history after every user cell of ``shell`` (once per kernel)."""
    if _installed:
        return
    _installed.append(shell)
    if callable(getattr(shell, "_tee", None)):
        shell._tee = lambda channel: contextlib.nullcontext()
    shell.events.register("post_run_cell", lambda _result=None: trim(shell))


def trim(shell):
    """Drop what is older than the last ``KEEP_RESULTS`` cells (see the module doc)."""
    namespace = shell.user_ns
    history = shell.history_manager
    results = history.output_hist
    numbers = sorted(results)
    for number in numbers[: max(0, len(numbers) - KEEP_RESULTS)]:
        value = results.pop(number, None)
        name = f"_{number}"
        if name in namespace and namespace[name] is value:
            del namespace[name]
    last = shell.execution_count - 1
    for number in range(max(1, last - 2 * KEEP_RESULTS), last - KEEP_RESULTS + 1):
        namespace.pop(f"_i{number}", None)
    for hist in (history.input_hist_parsed, history.input_hist_raw):
        # Cells older than the kept ones: blank them, walking back only over what is not blank.
        index = min(len(hist) - 1, last - KEEP_RESULTS)
        while index > 0 and hist[index]:
            hist[index] = ""
            index -= 1
    history.outputs.clear()
    history.output_hist_reprs.clear()
    with history.db_input_cache_lock:
        if not getattr(history, "using_thread", False):
            history.db_input_cache.clear()
    with history.db_output_cache_lock:
        if not getattr(history, "using_thread", False):
            history.db_output_cache.clear()


def continue_at(number):
    """Make ``number`` the next user cell's number (``In[number]``, ``Cell In[number]``)."""
    from IPython import get_ipython

    shell = get_ipython()
    number = int(number)
    if number < 1:
        raise ValueError(f"a cell number starts at 1, not {number}")
    history = shell.history_manager
    for hist in (history.input_hist_parsed, history.input_hist_raw):
        if len(hist) < number:
            hist.extend([""] * (number - len(hist)))
    shell.execution_count = number
    return number
