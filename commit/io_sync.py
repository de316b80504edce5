"""Local files made durable together: one wait for many fsyncs instead of one each.

A task that writes many small files (a many-table batch: a file per table it touches;
a partitioned table: a file per partition) used to fsync each file and its directory
as it closed it, one after the other: two disk waits per file. Inside
``synced_together()``, a closing local file is flushed to the kernel and its
descriptor kept open; when the block ends without an error, every kept file is
fsynced, then each of their directories once, all on one thread pool (the filesystem
journal commits concurrent fsyncs together), and only then does the block return.
Nothing that names the files may leave the block before that: the caller returns its
messages after it.

The descriptor stays open until its fsync so that a write-back error is reported to it
(Linux reports such an error to descriptors that were open when it happened, not to
one opened later). At most ``MAX_KEPT`` files are kept: one more syncs the group at
once. The group is per thread; a file closed on another thread, or outside any block,
is synced as it closes, as before. A block that ends with an error closes the kept
descriptors without syncing (the caller discards those files).
"""

from __future__ import annotations

import contextlib
import io
import os
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field

from calving.commit.errors import FileIOError
from calving.commit.thread_pools import shared_pool

#: Files kept open for one group sync, at most.
MAX_KEPT = 256
_POOL = "calving-fsync"
_POOL_WORKERS = 8


@dataclass
class _Group:
    #: (open descriptor, path) of each file closed in the block, not yet fsynced.
    kept: list[tuple[int, str]] = field(default_factory=list)

    def sync(self) -> None:
        kept, self.kept = self.kept, []
        if not kept:
            return
        pool = shared_pool(_POOL, _POOL_WORKERS)
        try:
            _wait_all([pool.submit(_fsync_fd, fd, path) for fd, path in kept])
        finally:
            for fd, _ in kept:
                os.close(fd)
        directories = sorted({os.path.dirname(path) for _, path in kept})
        _wait_all([pool.submit(_fsync_dir, d) for d in directories])

    def abandon(self) -> None:
        kept, self.kept = self.kept, []
        for fd, _ in kept:
            with contextlib.suppress(OSError):
                os.close(fd)


_LOCAL = threading.local()


def _current() -> _Group | None:
    return getattr(_LOCAL, "group", None)


@contextlib.contextmanager
def synced_together() -> Iterator[None]:
    """Local files closed on this thread inside the block are fsynced together when it
    ends (see the module). Nested blocks join the outermost one."""
    if _current() is not None:
        yield
        return
    group = _LOCAL.group = _Group()
    try:
        yield
    except BaseException:
        group.abandon()
        raise
    finally:
        _LOCAL.group = None
    group.sync()


def keep_for_sync(fd: int, path: str) -> bool:
    """Keep a duplicate of a written file's descriptor ``fd`` (the caller closes its
    own) in this thread's group; False when no group is open (the caller syncs it)."""
    group = _current()
    if group is None:
        return False
    group.kept.append((os.dup(fd), path))
    if len(group.kept) >= MAX_KEPT:
        group.sync()
    return True


def _fsync_fd(fd: int, path: str) -> None:
    try:
        os.fsync(fd)
    except OSError as err:
        raise FileIOError(f"{path}: fsync failed: {err}") from err


def fsync_dir(directory: str) -> None:
    """Make a directory's entries durable (a file created or renamed in it); errors are
    plain ``OSError``s."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(directory: str) -> None:
    try:
        fsync_dir(directory)
    except OSError as err:
        raise FileIOError(f"{directory}: fsync failed: {err}") from err


def _wait_all(futures: list[Future[None]]) -> None:
    """Wait for every future; then the first error, if any, propagates."""
    errors = [f.exception() for f in futures]
    for error in errors:
        if error is not None:
            raise error


class LocalOutputStream(io.BufferedWriter):
    """A buffered local file (``FileIO.new_output_stream``) that fsyncs itself and its
    directory when closed (or, in a ``synced_together()`` block, when the block ends)."""

    def __init__(self, raw: io.FileIO, path: str, fsync: bool) -> None:
        super().__init__(raw, buffer_size=1 << 20)
        self._path = path
        self._do_fsync = fsync

    def close(self) -> None:
        if self.closed:
            return
        kept = False
        try:
            self.flush()
            if self._do_fsync:
                kept = keep_for_sync(self.fileno(), self._path)
                if not kept:
                    os.fsync(self.fileno())
        finally:
            super().close()
        if self._do_fsync and not kept:
            fsync_dir(os.path.dirname(self._path))
