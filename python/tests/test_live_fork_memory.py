"""A live fork refused for want of memory, before anything is forked (``agents.fork_live``)."""

import os

import pytest

from pi_repl_kernel import agents, launch, live_fork
from pi_repl_kernel.snapshot import fork as snapshot_fork


def test_a_fork_that_may_not_fit_in_memory_is_refused_with_what_to_do(monkeypatch):
    figures = {"MemAvailable:": 100 * 1024, "VmRSS:": 2048 * 1024}  # KiB
    monkeypatch.setattr(snapshot_fork, "_proc_kib", lambda path, field: figures[field])
    monkeypatch.setattr(launch, "started_by", "/nonexistent/connection.json")
    forks = []
    monkeypatch.setattr(os, "fork", lambda: forks.append(1) or pytest.fail("forked"))
    with pytest.raises(agents.AgentLimitExceeded) as refused:
        agents.fork_live()
    message = str(refused.value)
    assert "only 100 MiB of memory is free" in message, message
    assert "2048 MiB" in message and "fork=False" in message, message
    assert forks == []


def test_enough_memory_or_unreadable_figures_let_the_fork_go_ahead(monkeypatch):
    figures = {"MemAvailable:": 4096 * 1024, "VmRSS:": 2048 * 1024}
    monkeypatch.setattr(snapshot_fork, "_proc_kib", lambda path, field: figures[field])
    assert live_fork.memory_shortfall() is None
    monkeypatch.setattr(snapshot_fork, "_proc_kib", lambda path, field: None)
    assert live_fork.memory_shortfall() is None
