"""``shutdown.children``: a cluster notes its sentinel's children while they live, so that a stop
releases their leases by pid; a thread of the sentinel that ends while they are read must not
hide the children listed under the threads after it."""

from __future__ import annotations

from pathlib import Path

from sessions_app.workers import shutdown


def _proc(root: Path, pid: int, threads: dict[int, str | None]) -> None:
    for tid, listed in threads.items():
        task = root / "proc" / str(pid) / "task" / str(tid)
        task.mkdir(parents=True)
        if listed is not None:  # None: the thread ended between the listing and its read
            (task / "children").write_text(listed)


def test_a_thread_gone_mid_read_hides_no_other_threads_children(tmp_path, monkeypatch):
    _proc(tmp_path, 10, {10: "", 11: None, 12: "21 22 ", 13: "23"})
    monkeypatch.setattr(shutdown, "Path", lambda p: tmp_path / str(p).lstrip("/"))
    assert sorted(shutdown.children(10)) == [21, 22, 23]
    assert shutdown.children(99) == []  # a process gone: nothing
