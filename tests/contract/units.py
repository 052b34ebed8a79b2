"""What the Django store's contract tests share.

The two ways the Django store writes a unit, for the tests that run one on each:
``commit`` (a recorded unit, on the store's own connection where it has one) and ``atomic``
whose tool sends a statement first (a sync tool that used Django's connection: the checkpoint is
written there, in the tool's transaction). A sync tool's unit that sends no SQL is written as a
``commit`` is (``sessions_app.store.toolsql``)."""

from __future__ import annotations

from typing import Any, Callable


def unit_of(store: Any, direct: bool) -> Callable[..., Any]:
    return store.commit if direct else _tool_used_the_orm(store)


def _tool_used_the_orm(store: Any) -> Callable[..., Any]:
    async def atomic(turn_id: str, attempt: str, work: Callable[[Any], None]) -> Any:
        from sessions_app.models import Session

        def tool_then(tx: Any) -> None:
            Session.objects.exists()
            work(tx)

        return await store.atomic(turn_id, attempt, tool_then)

    return atomic


class NullSink:
    """An event sink that publishes nowhere (the tests read the store)."""

    async def publish(self, session: Any, events: Any) -> None:
        return None

    async def delta(self, session: Any, event: Any) -> None:
        return None
