"""The Message Batches API (``client.messages.batches``) of Anthropic's platform, through the SDK:
what the site's poller sends and reads (``sessions_app.workers.batch_poller``). The requests and the
answers as plain data are ``batch_requests``'s (no SDK).

Synchronous: the poller runs in a worker's sweeper thread. The client reads its key and base URL
from the environment, as the ``anthropic`` provider's does (``ANTHROPIC_API_KEY``,
``ANTHROPIC_BASE_URL``). A batch is Anthropic's platform only: Bedrock's and Vertex's batch
inference read and write files in a bucket, which June does not drive.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Iterator

import anthropic

#: seconds a create, retrieve or list may take (a lost create is found by the next pass)
TIMEOUT = 60.0
#: the most batches a recovery lists (pages of 100, newest first)
MOST_LISTED = 10_000


@dataclass(frozen=True)
class BatchState:
    id: str
    ended: bool
    created_at: float


@dataclass(frozen=True)
class Outcome:
    """One request's result: ``kind`` is succeeded, errored, expired or canceled."""

    custom_id: str
    kind: str
    message: dict[str, Any] | None
    error: str


class BatchApi:
    def __init__(self, *, api_key: str | None = None, base_url: str | None = None, timeout: float = TIMEOUT) -> None:
        # the SDK retries a create too: a retried create after a lost answer would send the batch
        # twice, so it does not (the poller's recovery finds a create whose answer was lost)
        self._client = anthropic.Anthropic(api_key=api_key, base_url=base_url, timeout=timeout, max_retries=0)

    def create(self, requests: Iterable[tuple[str, dict[str, Any]]]) -> str:
        """One batch of ``(custom_id, params)``; its id."""
        items, betas = [], set()
        for cid, params in requests:
            params = dict(params)
            betas.update(params.pop("betas", None) or ())
            items.append({"custom_id": cid, "params": params})
        if betas:
            made = self._client.beta.messages.batches.create(requests=items, betas=sorted(betas))  # type: ignore[arg-type]
        else:
            made = self._client.messages.batches.create(requests=items)  # type: ignore[arg-type]
        return str(made.id)

    def retrieve(self, batch_id: str) -> BatchState:
        b = self._client.messages.batches.retrieve(batch_id)
        return BatchState(b.id, b.processing_status == "ended", b.created_at.timestamp())

    def created_since(self, since: float, *, limit: int = 100, most: int = MOST_LISTED) -> list[BatchState]:
        """The batches created at ``since`` or after. The API lists the newest first, a page of
        ``limit`` at a time: the pages are read (the SDK asks for each next one) until a batch
        older than ``since``, or ``most`` batches (a site sending more than that in a grace period
        has its lost create found among the latest, or sends again: at worst twice). Oldest first:
        a lost create came right after ``since``, and a pass retrieves the first candidates."""
        found: list[BatchState] = []
        for n, b in enumerate(self._client.messages.batches.list(limit=limit)):
            at = b.created_at.timestamp()
            if at < since or n >= most:
                break
            found.append(BatchState(b.id, b.processing_status == "ended", at))
        return found[::-1]

    def cancel(self, batch_id: str) -> None:
        """Ask the API to stop processing the batch (its requests not yet answered are not)."""
        self._client.messages.batches.cancel(batch_id)

    def results(self, batch_id: str, wanted: set[str]) -> Iterator[Outcome]:
        """The results of an ended batch for the custom ids in ``wanted`` (the rest are skipped:
        a batch another process sent, found while recovering, holds others')."""
        for line in self._client.messages.batches.results(batch_id):
            if line.custom_id not in wanted:
                continue
            result = line.result.to_dict()
            kind = str(result.get("type"))
            if kind == "succeeded":
                yield Outcome(line.custom_id, kind, result.get("message"), "")
            else:
                detail = ((result.get("error") or {}).get("error") or {}).get("message") or ""
                yield Outcome(
                    line.custom_id, kind, None, f"the batch's request {kind}" + (f": {detail}" if detail else "")
                )

    def close(self) -> None:
        self._client.close()
