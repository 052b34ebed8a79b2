"""Agent folders loaded from two threads at once (a worker's sweeper thread and its first
attempt): each sees the whole agent."""

from __future__ import annotations

import threading

from agents_app import loader


def test_an_agent_loaded_by_two_threads_at_once_is_whole_in_both(tmp_path):
    """Pins turns answered by the default model in the chaos test (issue 16): the loader put an
    agent's module in sys.modules before running it, so a second thread loading agents meanwhile
    read an agent.py whose ``model = ...`` line had not run yet (model None: the demo model)."""
    folder = tmp_path / "slowagent"
    folder.mkdir()
    (folder / "instructions.md").write_text("be slow")
    (folder / "agent.py").write_text(
        "import threading\nthreading.Event().wait(0.3)  # a slow import: the other thread arrives meanwhile\n"
        "model = 'slowmodel'\n"
    )
    seen: list[object] = []

    def load() -> None:
        seen.append(loader.load_agent(folder).model)

    try:
        threads = [threading.Thread(target=load) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
    finally:
        import sys

        sys.modules.pop("june_agents.slowagent", None)
    assert seen == ["slowmodel", "slowmodel"]
