"""``StartGate``: the API's burst path (``POST …/turns?wait=false``, not a stream) entered by at
most N requests at once, each leaving its slot as its answer begins; nothing else waits."""

from __future__ import annotations

import asyncio

from sessions_app.web.startgate import StartGate, is_start


def _scope(path="/api/agents/ops/sessions/s1/turns", query=b"wait=false", method="POST", accept=b"*/*"):
    return {"type": "http", "method": method, "path": path, "query_string": query, "headers": [(b"accept", accept)]}


def test_only_the_burst_path_is_a_start():
    assert is_start(_scope())
    assert is_start(_scope(query=b"replace=true&wait=0"))
    assert not is_start(_scope(query=b""))  # waits for its turn's end
    assert not is_start(_scope(query=b"wait=true"))
    assert not is_start(_scope(accept=b"text/event-stream"))  # a stream
    assert not is_start(_scope(method="GET"))
    assert not is_start(_scope(path="/api/agents/ops/sessions/s1/turns/t1/cancel"))
    assert not is_start({"type": "websocket", "path": "/ws/"})


def test_at_most_n_starts_are_inside_and_each_leaves_as_its_answer_begins():
    inside, most, order = 0, 0, []

    async def app(scope, receive, send):
        nonlocal inside, most
        inside += 1
        most = max(most, inside)
        order.append(scope["n"])
        await asyncio.sleep(0.01)
        inside -= 1
        await send({"type": "http.response.start", "status": 202})
        await asyncio.sleep(0.05)  # the body after the answer began: the slot is free already
        await send({"type": "http.response.body", "body": b"{}"})

    async def main():
        gate = StartGate(app, limit=2)
        sent = []

        async def send(message):
            sent.append(message["type"])

        await asyncio.gather(*(gate({**_scope(), "n": i}, None, send) for i in range(7)))
        starts_most = most
        await asyncio.gather(*(gate({**_scope(query=b""), "n": 100 + i}, None, send) for i in range(5)))
        return sent, starts_most

    sent, starts_most = asyncio.run(main())
    assert starts_most == 2  # the starts, 2 at a time
    assert most == 5  # the 5 that are not starts went in together
    assert order[:7] == list(range(7))  # in the order they came
    assert sent.count("http.response.start") == 12


def test_a_start_that_fails_before_answering_gives_its_slot_back():
    async def app(scope, receive, send):
        raise RuntimeError("boom")

    async def main():
        gate = StartGate(app, limit=1)
        for _ in range(3):
            try:
                await gate(_scope(), None, None)
            except RuntimeError:
                pass
        return gate._slots._value

    assert asyncio.run(main()) == 1
