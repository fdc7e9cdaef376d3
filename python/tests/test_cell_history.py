"""``cell_history`` on a real IPython shell: what stays after each cell, and ``continue_at``.

Each test runs its cells in a fresh interpreter (IPython's shell is a per-process singleton),
configured as the kernel is: history database off, ``cache_size`` 1000.
"""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

PYTHON_DIR = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PYTHON_DIR))

from pi_repl_kernel.cell_history import KEEP_RESULTS  # noqa: E402

PRELUDE = f"""
import json, sys
sys.path.insert(0, {str(PYTHON_DIR)!r})
from traitlets.config import Config
from IPython.core.interactiveshell import InteractiveShell
from pi_repl_kernel import cell_history
config = Config()
config.HistoryManager.enabled = False
config.InteractiveShell.cache_size = 1000
shell = InteractiveShell.instance(config=config)
cell_history.install(shell)
def cell(code):
    result = shell.run_cell(code, store_history=True)
    return result.result
"""


def run(body):
    """Run ``body`` after the prelude; return the JSON it prints last."""
    script = PRELUDE + textwrap.dedent(body)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_only_the_last_results_and_inputs_stay():
    state = run(
        """
        for i in range(1, 26):
            cell(f"{i} * 10")
        ns = shell.user_ns
        history = shell.history_manager
        print(json.dumps({
            "out": sorted(ns["Out"]),
            "numbered": sorted(int(n[1:]) for n in ns if n[1:].isdigit() and n[0] == "_"),
            "inputs": sorted(int(n[2:]) for n in ns if n.startswith("_i") and n[2:].isdigit()),
            "in_kept": [i for i, s in enumerate(ns["In"]) if s],
            "in_len": len(ns["In"]),
            "unders": [ns["_"], ns["__"], ns["___"]],
            "outputs": len(history.outputs),
            "queued": len(history.db_input_cache),
        }))
        """
    )
    last = KEEP_RESULTS
    assert state["out"] == list(range(26 - last, 26))
    assert state["numbered"] == list(range(26 - last, 26))
    assert state["inputs"] == list(range(26 - last, 26))
    assert state["in_kept"] == list(range(26 - last, 26))
    assert state["in_len"] == 26, "In[N] stays cell N"
    assert state["unders"] == [250, 240, 230]
    assert state["outputs"] == 0
    assert state["queued"] == 0


def test_a_name_the_user_bound_is_left_alone():
    state = run(
        """
        cell("1 + 1")
        cell("_1 = 'mine'")
        for i in range(15):
            cell("3")
        print(json.dumps({"mine": shell.user_ns.get("_1")}))
        """
    )
    assert state["mine"] == "mine"


def test_a_trailing_semicolon_hides_and_the_next_result_shows():
    state = run(
        """
        hidden = cell("40 + 2;")
        shown = cell("40 + 2")
        print(json.dumps({"out": sorted(shell.user_ns["Out"]), "count": shell.execution_count}))
        """
    )
    assert state == {"out": [2], "count": 3}


def test_continue_at_numbers_the_next_cell():
    state = run(
        """
        cell("x = 1")
        cell_history.continue_at(40)
        cell("'forty'")
        ns = shell.user_ns
        print(json.dumps({"in40": ns["In"][40], "out": sorted(ns["Out"]), "i40": ns["_i40"],
                          "next": shell.execution_count}))
        """
    )
    assert state == {"in40": "'forty'", "out": [40], "i40": "'forty'", "next": 41}


def test_printing_is_not_copied_into_the_history():
    state = run(
        """
        cell("print('x' * 1000)\\nrecorded = sum(len(o) for o in get_ipython().history_manager.outputs.values())")
        print(json.dumps({"recorded": shell.user_ns["recorded"]}))
        """
    )
    assert state["recorded"] == 0
