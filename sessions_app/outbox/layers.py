"""UnixSocketChannelLayer: a Channels layer across processes of one machine, with no server.

The embedded default runs daphne and a separate ``qcluster`` (whose forked workers publish
events) on SQLite: ``InMemoryChannelLayer`` cannot cross processes and Redis is a server. This
layer pushes messages between processes over unix datagram sockets in one directory:

- every process that receives binds ``<dir>/<token>.sock`` (token = ``j<pid>x<random>``) and
  runs one reader thread that files incoming messages into per-channel queues and wakes the
  waiting ``receive()`` on whatever event loop it runs;
- a channel name carries its owner's token (``specific.j123x9f!a1b2``), so ``send`` goes to
  exactly one socket; group membership is kept by the process owning the channel, so
  ``group_send`` sends one datagram to every socket in the directory and each process delivers
  to its local members (a handful of processes: daphne, the q2 workers). Except for a session's
  group (``MARKED``): its process also marks it in the directory (an empty file
  ``g.<group>/<token>`` while the group has a member there) and ``group_send`` sends to the
  marked processes only. A session's events and deltas are most of the layer's messages and
  its members are the few browsers watching it: one nobody watches costs its sender one
  ``listdir`` and nobody else anything. Other groups (the cancel doorbell's: every worker
  process is in it, a ring is rare) are not marked: a mark is a folder made and removed, which
  costs more than the broadcasts it would save them;
- delivery is pushed (no polling): a message reaches a waiting receiver in well under a
  millisecond;
- bounded and expiring like Channels' layers: ``capacity`` messages per channel (over it a
  message is dropped, as ``group_send`` does everywhere), messages expire after ``expiry``
  seconds, memberships after ``group_expiry``; a datagram bigger than ``MAX_DATAGRAM`` goes
  through a spool file.

At-most-once, like every Channels layer: the durable event log is the truth (consumers fill gaps
from it). The directory is created 0700: only the site's own user can talk to its processes.
A socket left behind by a killed process is removed by the first sender that finds it dead.
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import errno
import logging
import os
import secrets
import socket
import threading
import time
from pathlib import Path
from typing import Any

import msgpack
from channels.exceptions import ChannelFull
from channels.layers import BaseChannelLayer
from django.conf import settings

log = logging.getLogger(__name__)

#: the groups whose members are marked in the directory (see the module docstring): sessions'
#: (``sink.group_name``)
MARKED = "june.session."
MAX_DATAGRAM = 60_000  # below the kernel's default unix datagram limit (wmem_default ~208 KiB)
#: how long a send waits for room in a receiver's queue before the message is dropped. The queue
#: holds ``net.unix.max_dgram_qlen`` datagrams (10 by default), and a receiver's reader thread
#: needs the GIL for each one: in a daphne at a full core under a burst of requests it waited
#: past 0.2 s (the old bound) for 14 messages of one run, 47 of its 200 watched deltas lost
SEND_RETRY_SECONDS = 1.0
#: the waits between tries: doubling from the first to the last, the last until the bound
SEND_BACKOFF = (0.001, 0.05)
#: after a drop, sends to that receiver try once without waiting for this long (a stopped or
#: swamped process is not waited on by every message queued behind it)
STALLED_SECONDS = 1.0


class UnixSocketChannelLayer(BaseChannelLayer):
    extensions = ["groups", "flush"]

    def __init__(
        self,
        path: str | None = None,
        expiry: int = 60,
        group_expiry: int = 86400,
        capacity: int = 100,
        channel_capacity: Any = None,
    ) -> None:
        super().__init__(expiry=expiry, capacity=capacity, channel_capacity=channel_capacity)
        if path is None:
            path = str(Path(settings.VAR_DIR) / "channels")
        self.dir = Path(path)
        self._dir = str(self.dir)  # the hot paths join strings: a PurePath join parses its parts
        self._socks: dict[str, Path] = {}  # token -> its socket's path
        self.group_expiry = group_expiry
        self._lock = threading.Lock()
        self._pid: int | None = None
        self._token = ""
        self._sock: socket.socket | None = None
        self._sender: socket.socket | None = None
        self._sender_pid: int | None = None
        self._queues: dict[str, collections.deque] = {}
        self._waiters: dict[str, list[asyncio.Future]] = {}
        self._groups: dict[str, dict[str, float]] = {}
        self._stalled: dict[Path, float] = {}  # receiver socket -> until when a send does not wait

    # -- the Channels API -----------------------------------------------------------------------

    async def new_channel(self, prefix: str = "specific.") -> str:
        self._bind()
        return f"{prefix}{self._token}!{secrets.token_hex(8)}"

    async def send(self, channel: str, message: dict) -> None:
        assert isinstance(message, dict), "message is not a dict"
        self.require_valid_channel_name(channel)
        owner = self._owner(channel)
        if owner == self._token and self._pid == os.getpid():
            if not self._deliver_local(channel, message, raise_full=True):
                raise ChannelFull(channel)
            return
        payload = {"c": channel, "m": message}
        if owner:
            await self._send_to(self._socket_of(owner), payload)
        else:  # a normal channel: whichever process receives on it
            await self._broadcast(payload)

    async def receive(self, channel: str) -> dict:
        self.require_valid_channel_name(channel)
        self._bind()
        loop = asyncio.get_running_loop()
        while True:
            with self._lock:
                queue = self._queues.setdefault(channel, collections.deque())
                now = time.time()
                while queue:
                    expires, message = queue.popleft()
                    if expires >= now:
                        if not queue and channel not in self._waiters:
                            self._queues.pop(channel, None)  # a channel used once (/readyz's) leaves nothing
                        return message
                waiter = loop.create_future()
                self._waiters.setdefault(channel, []).append(waiter)
            try:
                await waiter
            finally:
                with self._lock:
                    waiting = self._waiters.get(channel, [])
                    if waiter in waiting:
                        waiting.remove(waiter)
                    if not waiting:
                        self._waiters.pop(channel, None)
                        if waiter.cancelled() and not self._queues.get(channel):
                            self._queues.pop(channel, None)  # its consumer went away

    async def group_add(self, group: str, channel: str) -> None:
        self.require_valid_group_name(group)
        self.require_valid_channel_name(channel)
        if self._is_local(channel):
            self._add_local(group, channel)
        elif owner := self._owner(channel):
            await self._send_to(self._socket_of(owner), {"add": group, "c": channel})

    async def group_discard(self, group: str, channel: str) -> None:
        self.require_valid_group_name(group)
        self.require_valid_channel_name(channel)
        if self._is_local(channel):
            self._discard_local(group, channel)
        elif owner := self._owner(channel):
            await self._send_to(self._socket_of(owner), {"discard": group, "c": channel})

    async def group_send(self, group: str, message: dict) -> None:
        assert isinstance(message, dict), "message is not a dict"
        self.require_valid_group_name(group)
        mine = self._token if self._pid == os.getpid() else None
        if mine:
            self._deliver_group(group, message)
        if not group.startswith(MARKED):
            await self._broadcast({"g": group, "m": message}, skip_self=True)
            return
        try:
            tokens = [t for t in os.listdir(f"{self._dir}/g.{group}") if t != mine]
        except OSError:  # no marks: no member in any other process
            return
        if tokens:
            data = msgpack.packb({"g": group, "m": message}, use_bin_type=True)
            for token in tokens:
                if not await self._send_bytes(self._socket_of(token), data):
                    _unlink(self._marks(group) / token)  # its process is gone

    async def flush(self) -> None:
        with self._lock:
            self._queues.clear()
            for group in self._groups:
                if group.startswith(MARKED):
                    _unlink(self._marks(group) / self._token)
            self._groups.clear()

    # -- names and local delivery -------------------------------------------------------------------

    @staticmethod
    def _owner(channel: str) -> str:
        if "!" not in channel:
            return ""
        return channel.split("!", 1)[0].rsplit(".", 1)[-1]

    def _is_local(self, channel: str) -> bool:
        return self._pid == os.getpid() and self._owner(channel) == self._token

    def _socket_of(self, token: str) -> Path:
        path = self._socks.get(token)
        if path is None:
            if len(self._socks) >= 1024:  # tokens of processes long gone
                self._socks.clear()
            path = self._socks[token] = self.dir / f"{token}.sock"
        return path

    def _marks(self, group: str) -> Path:
        """The folder of ``group``'s marks: one empty file per process with a member (its token)."""
        return self.dir / f"g.{group}"

    def _add_local(self, group: str, channel: str) -> None:
        with self._lock:
            members = self._groups.setdefault(group, {})
            if not members and group.startswith(MARKED):
                self._mark(group)  # before returning: a group_send after group_add must reach it
            members[channel] = time.time() + self.group_expiry

    def _discard_local(self, group: str, channel: str) -> None:
        with self._lock:
            members = self._groups.get(group, {})
            members.pop(channel, None)
            if not members:
                self._groups.pop(group, None)
                if not group.startswith(MARKED):
                    return
                marks = self._marks(group)
                _unlink(marks / self._token)
                try:
                    marks.rmdir()
                except OSError:  # another process's mark is in it (or it is gone already)
                    pass

    def _mark(self, group: str) -> None:
        marks = self._marks(group)
        for _ in range(3):  # another process may remove the empty folder between the two calls
            try:
                marks.mkdir(mode=0o700, exist_ok=True)
                os.close(os.open(marks / self._token, os.O_CREAT | os.O_WRONLY, 0o600))
                return
            except FileNotFoundError:
                continue
        log.warning("channel layer: could not mark group %s; its messages from other processes are lost", group)

    def _deliver_local(self, channel: str, message: dict, *, raise_full: bool = False) -> bool:
        with self._lock:
            queue = self._queues.setdefault(channel, collections.deque())
            if len(queue) >= self.get_capacity(channel):
                return False
            queue.append((time.time() + self.expiry, message))
            waiters = self._waiters.pop(channel, [])
        for waiter in waiters:
            try:
                waiter.get_loop().call_soon_threadsafe(_wake, waiter)
            except RuntimeError:  # its loop is closed: nobody waits there any more
                pass
        return True

    def _deliver_group(self, group: str, message: dict) -> None:
        now = time.time()
        with self._lock:
            members = self._groups.get(group, {})
            for channel in [c for c, exp in members.items() if exp < now]:
                del members[channel]
            channels = list(members)
        for channel in channels:
            if not self._deliver_local(channel, message):
                log.debug("channel %s over capacity: message to group %s dropped", channel, group)

    # -- the socket -----------------------------------------------------------------------------------

    def _bind(self) -> None:
        """Bind this process's socket and start its reader (again after a fork)."""
        if self._pid == os.getpid():
            return
        with self._lock:
            if self._pid == os.getpid():
                return
            self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            token = f"j{os.getpid()}x{secrets.token_hex(4)}"
            path = self.dir / f"{token}.sock"
            if len(str(path)) > 100:
                raise RuntimeError(f"socket path too long for a unix socket: {path}")
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            sock.bind(str(path))
            os.chmod(path, 0o600)
            self._sock, self._token, self._pid = sock, token, os.getpid()
            self._queues, self._waiters, self._groups = {}, {}, {}
            atexit.register(_unlink, path)
            threading.Thread(target=self._read, args=(sock,), name="june-layer", daemon=True).start()

    def _read(self, sock: socket.socket) -> None:
        while True:
            try:
                data = sock.recv(MAX_DATAGRAM + 1024)
                self._dispatch(msgpack.unpackb(data, raw=False))
            except OSError:
                if sock.fileno() < 0:
                    return
                log.exception("channel layer socket read failed")
            except Exception:
                log.exception("channel layer: undecodable datagram dropped")

    def _dispatch(self, payload: dict) -> None:
        if "spool" in payload:
            spool = Path(payload["spool"])
            try:
                payload = msgpack.unpackb(spool.read_bytes(), raw=False)
            finally:
                _unlink(spool)
        if "g" in payload:
            self._deliver_group(payload["g"], payload["m"])
        elif "add" in payload:
            self._add_local(payload["add"], payload["c"])
        elif "discard" in payload:
            self._discard_local(payload["discard"], payload["c"])
        elif "c" in payload:
            channel = payload["c"]
            if self._owner(channel) or channel in self._waiters or channel in self._queues:
                self._deliver_local(channel, payload["m"])

    def _sender_socket(self) -> socket.socket:
        if self._sender is None or self._sender_pid != os.getpid():
            self._sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            self._sender.setblocking(False)
            self._sender_pid = os.getpid()
        return self._sender

    async def _broadcast(self, payload: dict, *, skip_self: bool = False) -> None:
        if not self.dir.is_dir():
            return
        data = msgpack.packb(payload, use_bin_type=True)
        mine = f"{self._token}.sock" if self._pid == os.getpid() else None
        for name in os.listdir(self.dir):
            if name.endswith(".sock") and not (skip_self and name == mine):
                await self._send_bytes(self.dir / name, data)

    async def _send_to(self, path: Path, payload: dict) -> None:
        await self._send_bytes(path, msgpack.packb(payload, use_bin_type=True))

    async def _send_bytes(self, path: Path, data: bytes) -> bool:
        """Send one datagram to the socket ``path``; False when its process is gone."""
        if len(data) > MAX_DATAGRAM:
            spool = path.with_name(f".{path.stem}.{secrets.token_hex(8)}.spool")
            spool.write_bytes(data)
            data = msgpack.packb({"spool": str(spool)}, use_bin_type=True)
        sock = self._sender_socket()
        now = time.monotonic()
        deadline = now if self._stalled.get(path, 0.0) > now else now + SEND_RETRY_SECONDS
        pause, longest = SEND_BACKOFF
        while True:
            try:
                sock.sendto(data, str(path))
                self._stalled.pop(path, None)
                return True
            except BlockingIOError:  # the receiver's queue is full for a moment
                now = time.monotonic()
                if now >= deadline:
                    self._stalled[path] = now + STALLED_SECONDS
                    log.warning("channel layer: %s is not draining; message dropped", path.name)
                    return True
                await asyncio.sleep(min(pause, deadline - now))
                pause = min(pause * 2, longest)
            except (ConnectionRefusedError, FileNotFoundError):  # its process is gone
                _unlink(path)
                return False
            except OSError as exc:
                if exc.errno in (errno.ENOTSOCK, errno.ECONNREFUSED):
                    _unlink(path)
                    return False
                raise


def _wake(waiter: asyncio.Future) -> None:
    if not waiter.done():
        waiter.set_result(None)


def _unlink(path: Path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
