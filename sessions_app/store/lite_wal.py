"""The WAL's checkpoints of the store's SQLite connections, off the units (``lite``'s docstring
says why): a thread of the process copies the WAL back every ``CHECKPOINT_EVERY`` commits, and
the next commit moves what was committed meanwhile. Also how a connection to the database file
is opened (``open_file``: Django's pragmas) and the file's identity (``file_inode``)."""

from __future__ import annotations

import logging
import os
import queue
import sqlite3
import threading
import urllib.parse

from django.db import connections

log = logging.getLogger(__name__)


def open_file(path: str, init_command: str) -> sqlite3.Connection:
    """A connection to ``path`` with the pragmas of Django's (``foreign_keys``, then the
    settings' ``init_command``: WAL, synchronous=NORMAL)."""
    conn = sqlite3.connect(path, timeout=0, isolation_level=None, check_same_thread=False, uri=True)
    try:
        conn.execute("PRAGMA foreign_keys = ON")
        for command in init_command.split(";"):
            if command := command.strip():
                conn.execute(command)
    except BaseException:
        conn.close()
        raise
    return conn


def file_inode(path: str) -> int | None:
    """The file's identity (None: gone, or a ``file:`` URI, which is not a path)."""
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


#: commits on the store's connections between two checkpoints: a unit writes a few pages (a
#: 3-step turn about 40 over its 8 commits), so the WAL starts over at about 500 pages, before
#: SQLite's automatic checkpoint (1,000 pages) would run in a unit
CHECKPOINT_EVERY = 96


class _Kept:
    """A connection of the checkpoints' thread, the file it opened (its inode: a file dropped
    and created again is another database, which gets a connection of its own), and the
    ``forget`` it was opened after (one opened before the last is closed when next seen)."""

    __slots__ = ("conn", "path", "inode", "epoch")

    def __init__(self, conn: sqlite3.Connection, path: str, inode: int | None, epoch: int) -> None:
        self.conn, self.path, self.inode, self.epoch = conn, path, inode, epoch


class _Checkpoints:
    """The WAL's checkpoints, off the units: the process's thread moves the bulk of the WAL to
    the database (``checkpoint_wal``), then the next commit here moves the few pages committed
    in the meantime, on the thread's connection. The WAL starts over from its beginning only
    once every page in it was moved, at the next write: while units commit without a pause,
    the thread alone would never get there. The thread starts with the first request; it
    waits on its queue of database files, so it costs nothing while no unit commits.

    The thread keeps its connection for the next checkpoint of the same file: a connection's
    first statement reads the whole schema (2M instructions for this site's, once every
    ``CHECKPOINT_EVERY`` commits when each checkpoint opened its own)."""

    def __init__(self) -> None:
        self.commits = 0
        self.thread: threading.Thread | None = None
        #: what the thread does: a checkpoint of a file (path, init_command), a connection lent
        #: for the rest and given back (kept for the next), None: close the kept ones (``forget``)
        self.files: queue.SimpleQueue[tuple[str, str] | _Kept | None] = queue.SimpleQueue()
        self.lock = threading.Lock()
        #: the thread's connection once it moved the bulk: the next commit moves the rest on it
        self.rest: _Kept | None = None
        #: by file: the thread's connections, not lent (only the thread touches it; here, not in
        #: its frame, so a forked child keeps them referenced with the rest: ``_after_fork``)
        self.idle: dict[str, _Kept] = {}
        #: ``forget``s so far: a connection in the thread's hands at one is closed when it is done
        self.epoch = 0

    def wrote(self, path: str) -> None:
        """A commit on this thread's connection to ``path`` (the count is shared by the threads without a
        lock: a lost increment only delays a checkpoint)."""
        if self.rest is not None and self.lock.acquire(blocking=False):
            kept, self.rest = self.rest, None
            self.lock.release()
            if kept is not None:
                try:
                    kept.conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
                except sqlite3.Error as exc:  # the unit committed: the next request tries again
                    log.warning("SQLite checkpoint: %s", exc)
                finally:
                    self.files.put(kept)  # back to the thread, for its next checkpoint
        self.commits += 1
        if self.commits >= CHECKPOINT_EVERY:
            self.commits = 0
            self.request(path)

    def forget(self) -> None:
        """Close the checkpoints' connections (``close_all``): the rest lent to a commit here,
        the thread's kept ones there."""
        with self.lock:
            kept, self.rest = self.rest, None
            self.epoch += 1
        if kept is not None:
            kept.conn.close()
        if self.thread is not None:
            self.files.put(None)

    def request(self, path: str) -> None:
        """A checkpoint of ``path`` (the file a store connection of this thread opened)."""
        if self.thread is None:
            with self.lock:
                if self.thread is None:
                    self.thread = threading.Thread(target=self.run, name="june-sqlite-checkpoints", daemon=True)
                    self.thread.start()
        init_command = connections["default"].settings_dict.get("OPTIONS", {}).get("init_command", "")
        self.files.put((path, init_command))

    def run(self) -> None:
        idle = self.idle
        while True:
            item = self.files.get()
            if item is None:
                for each in idle.values():
                    each.conn.close()
                idle.clear()
                continue
            if isinstance(item, _Kept):
                self._keep(item)
                continue
            path, init_command = item
            kept: _Kept | None = idle.pop(path, None)
            if kept is None:
                with self.lock:  # lent for a rest no commit took yet: this checkpoint moves it
                    if self.rest is not None and self.rest.path == path:
                        kept, self.rest = self.rest, None
            if kept is not None and (kept.epoch != self.epoch or kept.inode is None or file_inode(path) != kept.inode):
                kept.conn.close()  # forgotten, or another file by that name now
                kept = None
            try:
                if kept is None:
                    epoch = self.epoch
                    inode = file_inode(path)  # before the open: a file replaced between them is opened again
                    conn, busy = checkpoint_wal(path, init_command)
                    kept = _Kept(conn, path, inode, epoch)
                else:
                    busy = checkpoint_passes(kept.conn)
            except sqlite3.Error as exc:  # the next request tries again, on a new connection
                log.warning("SQLite checkpoint of %s: %s", path, exc)
                if kept is not None:
                    kept.conn.close()
                continue
            if busy:  # another connection was checkpointing: it moves the rest
                self._keep(kept)
                continue
            with self.lock:
                if kept.epoch == self.epoch:
                    kept, self.rest = self.rest, kept
            if kept is not None:  # forgotten meanwhile, or a rest no commit took (a later checkpoint moves its pages)
                self._keep(kept)

    def _keep(self, kept: _Kept) -> None:
        """Keep ``kept`` for its file's next checkpoint, unless it was forgotten or one is kept
        for that file already (the thread's)."""
        if kept.epoch != self.epoch or kept.path in self.idle:
            kept.conn.close()
        else:
            self.idle[kept.path] = kept


#: PASSIVE checkpoints the thread runs in a row, each moving what units committed during the
#: one before (fewer pages each time): the commit that moves the rest then has little to move
CHECKPOINT_PASSES = 3


def checkpoint_wal(path: str, init_command: str) -> tuple[sqlite3.Connection, bool]:
    """PASSIVE checkpoints of ``path`` (``checkpoint_passes``) on a connection of its own; the
    connection, with whether another checkpoint was running. The file is opened read-write,
    never created: a test database dropped in the meantime stays dropped."""
    uri = path if path.startswith("file:") else f"file:{urllib.parse.quote(path)}?mode=rw"
    conn = open_file(uri, init_command)
    try:
        busy = checkpoint_passes(conn)
    except BaseException:
        conn.close()
        raise
    return conn, busy


def checkpoint_passes(conn: sqlite3.Connection) -> bool:
    """PASSIVE checkpoints (they take no lock a writer waits for) until one found no page
    committed since the one before (or ``CHECKPOINT_PASSES``); whether another checkpoint was
    running."""
    seen = None
    for _ in range(CHECKPOINT_PASSES):
        busy, wal, _ = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        if busy or wal == seen:
            break
        seen = wal
    return bool(busy)


checkpoints = _Checkpoints()
_inherited: list[_Checkpoints] = []


def _after_fork() -> None:
    """A forked child inherits the parent's checkpoints but not their thread, nor the use of
    the parent's connection (SQLite's rule): it starts its own, and never closes the parent's
    (closing it here could undo what the parent holds)."""
    global checkpoints
    _inherited.append(checkpoints)
    checkpoints = _Checkpoints()


os.register_at_fork(after_in_child=_after_fork)
