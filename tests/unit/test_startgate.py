"""``StartGate``: the API's burst path (a JSON ``POST …/turns?wait=false``, not a stream) served
whole on a pool of N threads, in the order the requests came; nothing else goes through it."""

from __future__ import annotations

import asyncio
import threading
import time

from sessions_app.web.startgate import StartGate, is_start


def _scope(path="/api/agents/ops/sessions/s1/turns", query=b"wait=false", method="POST", accept=b"*/*", kind=None):
    headers = [(b"accept", accept)] + ([(b"content-type", kind)] if kind else [])
    return {"type": "http", "method": method, "path": path, "query_string": query, "headers": headers}


def test_only_the_burst_path_is_a_start():
    assert is_start(_scope())
    assert is_start(_scope(query=b"replace=true&wait=0"))
    assert is_start(_scope(kind=b"application/json"))
    assert not is_start(_scope(kind=b"multipart/form-data; boundary=x"))  # a start with its files
    assert not is_start(_scope(query=b""))  # waits for its turn's end
    assert not is_start(_scope(query=b"wait=true"))
    assert not is_start(_scope(accept=b"text/event-stream"))  # a stream
    assert not is_start(_scope(method="GET"))
    assert not is_start(_scope(path="/api/agents/ops/sessions/s1/turns/t1/cancel"))
    assert not is_start({"type": "websocket", "path": "/ws/"})


def _receive(body: bytes = b"{}"):
    parts = [{"type": "http.request", "body": body[:1], "more_body": True}, {"type": "http.request", "body": body[1:]}]

    async def receive():
        return parts.pop(0)

    return receive


def test_at_most_n_starts_are_served_at_once_in_order_each_whole_on_a_kept_thread():
    inside, most, order, threads, lock = 0, 0, [], set(), threading.Lock()

    def serve(scope, body):
        nonlocal inside, most
        with lock:
            inside += 1
            most = max(most, inside)
            order.append(scope["n"])
            threads.add(threading.get_ident())
        time.sleep(0.01)
        with lock:
            inside -= 1
        return 202, [(b"content-type", b"application/json")], body.read()

    others = []

    async def app(scope, receive, send):
        others.append(scope["n"])
        await send({"type": "http.response.start", "status": 200})

    async def main():
        gate = StartGate(app, serve, limit=2)
        sent = []

        async def send(message):
            sent.append(message)

        await asyncio.gather(*(gate({**_scope(), "n": i}, _receive(b'{"n": 1}'), send) for i in range(7)))
        await asyncio.gather(*(gate({**_scope(query=b""), "n": 100 + i}, _receive(), send) for i in range(5)))
        return sent

    sent = asyncio.run(main())
    assert most == 2 and len(threads) == 2  # the starts, 2 at a time, on the pool's 2 threads
    assert order == list(range(7))  # in the order they came
    assert others == [100, 101, 102, 103, 104]  # the rest: the application's, not the pool's
    bodies = [m["body"] for m in sent if m["type"] == "http.response.body"]
    assert bodies == [b'{"n": 1}'] * 7  # each start's whole body reached it


def test_a_start_whose_client_went_away_is_not_served():
    served = []

    async def receive():
        return {"type": "http.disconnect"}

    async def main():
        gate = StartGate(None, lambda scope, body: served.append(scope), limit=1)
        await gate(_scope(), receive, None)

    asyncio.run(main())
    assert served == []


def test_without_a_django_server_every_request_goes_to_the_application():
    seen = []

    async def app(scope, receive, send):
        seen.append(scope["path"])

    asyncio.run(StartGate(app)(_scope(), None, None))
    assert seen == ["/api/agents/ops/sessions/s1/turns"]
