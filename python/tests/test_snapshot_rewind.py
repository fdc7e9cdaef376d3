"""Rewind (issue 25): every committed state with a cell number is kept, a rewind revives one of
them into the namespace, the state before it stays kept, and the window lets old states go
without collecting a blob a kept state still names."""

import os

import pytest

from conftest import new_namespace, run
from pi_repl_kernel import snapshot
from pi_repl_kernel.snapshot import rewinding as snapshot_rewind
from pi_repl_kernel.snapshot import kept_states as snapshot_states


@pytest.fixture
def api(api):
    """conftest's API, whose ``configure`` also checks its answer and restores (as the host does)."""
    configure = api.configure

    def configure_and_restore(**options):
        assert configure(**options) == {"ok": True}
        snapshot.restore(phase="all")

    api.configure = configure_and_restore
    return api


def answer(api, cell, code):
    """Run ``code`` as answered cell ``cell`` and commit its state, as a capture would."""
    run(api.namespace, code)
    saved = snapshot.save(cells={"through": cell, "missing": []})
    assert saved["committed"], saved
    return saved


def test_every_committed_cell_state_is_kept_and_can_be_rewound_to(api, capsys):
    api.configure()
    answer(api, 1, "a = 1; big = bytearray(b'x') * (4 << 20)")
    answer(api, 2, "b = [1, 2, 3]; big[0] = ord('y')")
    answer(api, 3, "del a; c = 'later'")
    assert snapshot.states() == {"cells": [1, 2, 3]}

    snapshot.rewind(1, {"through": 4, "missing": []})
    notice = capsys.readouterr().out
    assert "state right after cell 1" in notice and "Files" in notice
    assert "Removed (bound after cell 1): b, c." in notice
    assert api.namespace["a"] == 1 and "b" not in api.namespace and "c" not in api.namespace
    assert api.namespace["big"][0] == ord("x") and len(api.namespace["big"]) == 4 << 20

    # The rewound state commits as the rewind cell's own; the one before the rewind is kept.
    answer(api, 5, "pass")
    snapshot.rewind(4, {"through": 6, "missing": []})
    assert api.namespace["c"] == "later" and "a" not in api.namespace
    assert api.namespace["big"][0] == ord("y")


def test_a_rewind_survives_a_restart(api, capsys):
    api.configure()
    answer(api, 1, "x = 'one'")
    answer(api, 2, "x = 'two'; y = 2")
    api.namespace.clear()
    api.namespace.update(new_namespace())
    api.configure()  # a new kernel: revives cell 2's state
    assert api.namespace["x"] == "two"
    snapshot.rewind(1, {"through": 3, "missing": []})
    assert api.namespace["x"] == "one" and "y" not in api.namespace
    assert "Restored as they were then: x." in capsys.readouterr().out


def test_a_state_not_kept_is_refused_with_the_kept_ones_named(api):
    api.configure()
    answer(api, 1, "x = 1")
    answer(api, 2, "x = 2")
    with pytest.raises(snapshot_rewind.RewindError) as refused:
        snapshot.rewind(7, {"through": 3, "missing": []})
    assert "not kept" in str(refused.value) and "after cells 1-2" in refused.value.hint
    assert api.namespace["x"] == 2  # nothing changed


def test_a_tampered_kept_state_is_refused_and_changes_nothing(api):
    api.configure()
    answer(api, 1, "x = 1")
    answer(api, 2, "x = 2")
    path = os.path.join(api.session.state_dir, "states", "1.json")
    with open(path) as file:
        text = file.read()
    with open(path, "w") as file:
        file.write(text.replace('"generation": 1', '"generation": 9'))
    with pytest.raises(snapshot_rewind.RewindError, match="not signed"):
        snapshot.rewind(1, {"through": 3, "missing": []})
    assert api.namespace["x"] == 2


def test_a_cell_that_changed_nothing_has_the_state_of_the_cell_before(api):
    api.configure()
    answer(api, 1, "x = 1")
    answer(api, 2, "y = 2")  # then cell 3 changes nothing: the same manifest content
    saved = snapshot.save(cells={"through": 3, "missing": []})
    assert saved["committed"] and not saved["manifest_written"]
    assert snapshot.states() == {"cells": [1, 2, 3]}
    assert snapshot_states.resolve(api.session.state_dir, 3).endswith("2.json")


def test_the_window_lets_old_states_go_but_never_a_blob_a_kept_state_names(api):
    api.configure(keep_states=3)
    for cell in range(1, 7):
        answer(api, cell, f"v{cell} = bytes([{cell}]) * (1 << 20)")
    assert snapshot.states() == {"cells": [4, 5, 6]}
    snapshot.rewind(4, {"through": 7, "missing": []})
    assert api.namespace["v1"] == bytes([1]) * (1 << 20)
    assert "v5" not in api.namespace and "v6" not in api.namespace


def test_the_window_stops_at_its_size(api):
    api.configure(keep_bytes=(3 << 20) + (64 << 10))
    for cell in range(1, 6):
        # Every cell rebinds one 1 MiB value that does not compress: each state holds 1 MiB
        # that no other one does.
        answer(api, cell, "v = __import__('os').urandom(1 << 20)")
    # The current state's own blobs are not counted; three older ones fit in 3 MiB.
    assert snapshot.states() == {"cells": [2, 3, 4, 5]}
    blobs = sum(len(files) for _, _, files in os.walk(
        os.path.join(api.session.state_dir, "blobs")))
    assert blobs == 4  # one stream per kept state: the fifth's was collected


def test_a_rewind_waits_for_a_running_save_child_and_keeps_its_state(api):
    """Regression: the rewind reaps save children itself; a summary kept for the host must not
    make it loop (``status`` hands those out first), and stays the host's to collect."""
    api.configure()
    answer(api, 1, "x = 1")
    run(api.namespace, "x = 2")
    started = snapshot.save(background=True, cells={"through": 2, "missing": []})
    assert started.get("started"), started
    snapshot._store.unreported.append({"committed": True, "earlier": True})
    snapshot.rewind(1, {"through": 2, "missing": []})
    assert api.namespace["x"] == 1
    assert snapshot.states() == {"cells": [1, 2]}
    assert snapshot.save_status()["finished"] == {"committed": True, "earlier": True}
    assert snapshot.save_status()["finished"]["committed"] is True  # the child's, adopted
