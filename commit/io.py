"""File access for table files: local filesystems and S3-compatible object stores.

Locations are URIs. The canonical form of a local file is ``file:///abs/path``: it is
what calving writes into metadata, manifests and the catalog, because pyiceberg, DuckDB's
iceberg extension and iceberg-rust (pyiceberg-core) all open it, while iceberg-rust
rejects bare paths. On input, bare absolute paths (``/abs/path``), ``file:/abs/path`` and
``file://localhost/abs/path`` are accepted too. The path part is used verbatim (no
percent-decoding), as pyiceberg does. Object stores: ``s3://bucket/key`` (also ``s3a://``
and ``s3n://``), through ``pyarrow.fs.S3FileSystem``.

Errors: a missing file is ``FileNotFoundInTableError`` (terminal); any other storage
failure is ``FileIOError`` (transient). Secrets are never put in messages or ``repr``.

Local writes are made durable (file and directory fsync) before they return, because a
catalog may point at the file right after: a crash must not leave the table naming a file
the page cache never flushed.
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import io
import os
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Protocol
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.fs as pafs

from calving.commit.errors import (
    CalvingError,
    ConfigError,
    CorruptFileError,
    FileAlreadyExistsError,
    FileIOError,
    FileNotFoundInTableError,
    InvalidLocationError,
    UnsupportedFeatureError,
)
from calving.commit.io_sync import LocalOutputStream, fsync_dir, keep_for_sync
from calving.commit.thread_pools import shared_pool

S3_SCHEMES = ("s3", "s3a", "s3n")
LOCAL_SCHEME = "file"

# Property keys (the same names pyiceberg and Iceberg Java use).
S3_ENDPOINT = "s3.endpoint"
S3_REGION = "s3.region"
S3_ACCESS_KEY_ID = "s3.access-key-id"
S3_SECRET_ACCESS_KEY = "s3.secret-access-key"
S3_SESSION_TOKEN = "s3.session-token"
LOCAL_FSYNC = "calving.local.fsync"  # "false" skips fsync (tests, benchmarks on tmpfs)

_SECRET_KEYS = frozenset({S3_SECRET_ACCESS_KEY, S3_SESSION_TOKEN})

FileNotFound = FileNotFoundInTableError  # short alias

#: Called, in this thread's context only, with the locations a write is about to create,
#: before any byte is written: a maintenance run's journal records them
#: (``calving.commit.maintenance.journal``). An error it raises fails the write.
WRITE_LISTENER: contextvars.ContextVar[Callable[[Sequence[str]], None] | None] = (
    contextvars.ContextVar("calving_write_listener", default=None)
)


def _announce(locations: Sequence[str]) -> None:
    listener = WRITE_LISTENER.get()
    if listener is not None:
        listener(locations)


class OutputStream(Protocol):
    """What ``FileIO.new_output_stream`` returns: a binary sink (pyarrow accepts it)."""

    def write(self, data: bytes, /) -> int: ...

    def tell(self) -> int: ...

    def close(self) -> None: ...

    def __enter__(self) -> Any: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
        /,
    ) -> Any: ...


# ---------------------------------------------------------------- location forms


def scheme_of(location: str) -> str:
    """``file`` for local locations (URI or bare absolute path), else the URI scheme."""
    if location.startswith(("/", "file:")):
        return LOCAL_SCHEME
    scheme = urlparse(location).scheme.lower()
    if not scheme:
        raise InvalidLocationError(f"{location!r}: not an absolute path or URI")
    return scheme


def local_path(location: str) -> str:
    """The OS path of a local location (``file://`` URI or bare absolute path)."""
    if location.startswith("/"):
        return location
    if not location.startswith("file:"):
        raise InvalidLocationError(f"{location!r}: not a local location")
    rest = location[len("file:") :]
    if rest.startswith("//"):
        host, slash, path = rest[2:].partition("/")
        if host not in ("", "localhost"):
            raise InvalidLocationError(f"{location!r}: remote file host {host!r}")
        rest = slash + path
    if not rest.startswith("/"):
        raise InvalidLocationError(f"{location!r}: local location is not absolute")
    return rest


def to_uri(location: str) -> str:
    """The canonical form of a location: ``file:///abs`` for local files (a relative
    path is made absolute against the current directory), other URIs unchanged."""
    if "://" not in location and not location.startswith("file:"):
        return "file://" + os.path.abspath(location)
    if scheme_of(location) == LOCAL_SCHEME:
        return "file://" + local_path(location)
    return location


def normalize(location: str) -> str:
    """The path pyarrow's local filesystem wants; other locations unchanged."""
    if scheme_of(location) == LOCAL_SCHEME:
        return local_path(location)
    return location


# ---------------------------------------------------------------- FileIO


@dataclass(frozen=True, order=True)
class ListedFile:
    """A file found by a listing: its location, size and modification time."""

    location: str
    size: int
    modified_ms: int


def _mtime_ms(info: pafs.FileInfo) -> int:
    mtime = info.mtime
    return 0 if mtime is None else int(mtime.timestamp() * 1000)


class FileIO:
    """Reads and writes table files by location; one instance serves every scheme.

    ``properties`` use Iceberg's keys: ``s3.endpoint`` (``http://host:port`` or
    ``host:port``), ``s3.region``, ``s3.access-key-id`` / ``s3.secret-access-key`` /
    ``s3.session-token`` (taken from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY /
    AWS_SESSION_TOKEN when absent; AWS_REGION / AWS_DEFAULT_REGION for the region).
    Picklable: filesystems are re-created lazily after unpickling.
    """

    def __init__(self, properties: Mapping[str, str] | None = None) -> None:
        self.properties: dict[str, str] = dict(properties or {})
        self._fsync = self.properties.get(LOCAL_FSYNC, "true").lower() != "false"
        self._local: pafs.FileSystem | None = None
        self._s3: pafs.FileSystem | None = None

    @classmethod
    def for_location(cls, location: str, properties: Mapping[str, str] | None = None) -> FileIO:
        """A FileIO for ``location``; fails early on a scheme calving cannot open."""
        scheme = scheme_of(location)
        if scheme != LOCAL_SCHEME and scheme not in S3_SCHEMES:
            raise UnsupportedFeatureError(f"{location}: storage scheme {scheme!r} is not supported")
        return cls(properties)

    def __repr__(self) -> str:
        shown = {k: ("***" if k in _SECRET_KEYS else v) for k, v in self.properties.items()}
        return f"FileIO({shown!r})"

    def __getstate__(self) -> dict[str, Any]:
        return {"properties": self.properties}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["properties"])  # type: ignore[misc]

    # ------------------------------------------------------------ resolution

    def resolve(self, location: str) -> tuple[pafs.FileSystem, str]:
        """The pyarrow filesystem and the path within it for ``location``."""
        scheme = scheme_of(location)
        if scheme == LOCAL_SCHEME:
            if self._local is None:
                self._local = pafs.LocalFileSystem()
            return self._local, local_path(location)
        if scheme in S3_SCHEMES:
            parsed = urlparse(location)
            if not parsed.netloc:
                raise InvalidLocationError(f"{location!r}: no bucket")
            if self._s3 is None:
                self._s3 = pafs.S3FileSystem(**self.s3_options())
            return self._s3, parsed.netloc + parsed.path
        raise UnsupportedFeatureError(f"{location}: storage scheme {scheme!r} is not supported")

    _fs = resolve  # older name, kept for existing callers

    def s3_options(self) -> dict[str, Any]:
        """Keyword arguments for ``pyarrow.fs.S3FileSystem`` (contains secrets: never log)."""
        p, env = self.properties, os.environ
        options: dict[str, Any] = {}
        access = p.get(S3_ACCESS_KEY_ID) or env.get("AWS_ACCESS_KEY_ID")
        secret = p.get(S3_SECRET_ACCESS_KEY) or env.get("AWS_SECRET_ACCESS_KEY")
        if bool(access) != bool(secret):
            raise ConfigError(f"{S3_ACCESS_KEY_ID} and {S3_SECRET_ACCESS_KEY} go together")
        if access:
            options["access_key"] = access
            options["secret_key"] = secret
            token = p.get(S3_SESSION_TOKEN) or env.get("AWS_SESSION_TOKEN")
            if token:
                options["session_token"] = token
        region = p.get(S3_REGION) or env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
        if region:
            options["region"] = region
        endpoint = p.get(S3_ENDPOINT)
        if endpoint:
            if "://" in endpoint:
                parsed = urlparse(endpoint)
                options["scheme"] = parsed.scheme
                options["endpoint_override"] = parsed.netloc + parsed.path.rstrip("/")
            else:
                options["endpoint_override"] = endpoint
        return options

    # ------------------------------------------------------------ reading

    def read(self, location: str) -> bytes:
        fs, path = self.resolve(location)
        with _mapped(location, "read"), fs.open_input_file(path) as f:
            return bytes(f.read())

    def read_range(self, location: str, offset: int, length: int) -> bytes:
        """``length`` bytes at ``offset``; a shorter file is ``CorruptFileError``."""
        if offset < 0 or length < 0:
            raise ValueError(f"negative range {offset}+{length} for {location}")
        fs, path = self.resolve(location)
        with _mapped(location, "read"), fs.open_input_file(path) as f:
            data = bytes(f.read_at(length, offset))
        if len(data) != length:
            raise CorruptFileError(
                location, f"wanted {length} bytes at offset {offset}, file ends after {len(data)}"
            )
        return data

    def size(self, location: str) -> int:
        fs, path = self.resolve(location)
        with _mapped(location, "stat"):
            info = fs.get_file_info(path)
        if info.type == pafs.FileType.NotFound:
            raise FileNotFoundInTableError(location)
        if info.type != pafs.FileType.File:
            raise InvalidLocationError(f"{location}: not a file")
        return int(info.size)

    def exists(self, location: str) -> bool:
        fs, path = self.resolve(location)
        with _mapped(location, "stat"):
            return bool(fs.get_file_info(path).type != pafs.FileType.NotFound)

    def list_prefix(self, prefix: str) -> list[str]:
        """Files (recursively) whose location starts with ``prefix``, sorted, in the
        prefix's form (``file:///...`` for local files, the prefix's scheme for S3).
        A prefix ending in ``/`` or naming a directory lists that directory."""
        return [f.location for f in self.list_files(prefix)]

    def list_files(self, prefix: str) -> list[ListedFile]:
        """``list_prefix`` with each file's size and modification time."""
        fs, path = self.resolve(prefix)
        with _mapped(prefix, "list"):
            if path.endswith("/"):
                directory, wanted = path.rstrip("/") or "/", path
            elif fs.get_file_info(path).type == pafs.FileType.Directory:
                directory, wanted = path, path + "/"
            else:
                directory, wanted = path.rsplit("/", 1)[0] or "/", path
            selector = pafs.FileSelector(directory, recursive=True, allow_not_found=True)
            infos = fs.get_file_info(selector)
        scheme = scheme_of(prefix)
        root = "file://" if scheme == LOCAL_SCHEME else f"{scheme}://"
        return sorted(
            ListedFile(root + i.path, i.size or 0, _mtime_ms(i))
            for i in infos
            if i.type == pafs.FileType.File and i.path.startswith(wanted)
        )

    # ------------------------------------------------------------ writing

    def write(self, location: str, data: bytes) -> None:
        """Write a whole file, replacing any file of that name. Callers use fresh unique
        names; use ``create_exclusive`` where a replaced file would be a lost commit.
        Locally, in an ``io_sync.synced_together()`` block, it is fsynced when the block
        ends."""
        _announce((location,))
        fs, path = self.resolve(location)
        if fs is self._local:
            with _mapped(location, "write"):
                self._write_local(path, data, exclusive=False)
            return
        with _mapped(location, "write"), fs.open_output_stream(path) as f:
            f.write(data)

    def write_many(self, files: Sequence[tuple[str, bytes]]) -> None:
        """Write several whole files, as ``write`` does, overlapping their writes (and
        fsyncs) on a shared thread pool; locally each directory is fsynced once, after
        all its files (several directories' fsyncs overlap too). Every file is durable
        when this returns; on an error some may exist (callers name them in their
        written list beforehand)."""
        _announce([location for location, _ in files])
        if len(files) <= 1:
            for location, data in files:
                self.write(location, data)
            return
        if not all(self.resolve(location)[0] is self._local for location, _ in files):
            _run_all(self.write, files)
            return
        paths = [(location, local_path(location), data) for location, data in files]
        directories = sorted({os.path.dirname(path) for _, path, _ in paths})
        for directory in directories:
            os.makedirs(directory, exist_ok=True)

        def write_one(location: str, path: str, data: bytes) -> None:
            with _mapped(location, "write"):
                self._write_fd(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), data)

        def sync_one(directory: str) -> None:
            with _mapped(to_uri(directory), "sync"):
                self._sync_dir(directory)

        _run_all(write_one, paths)
        if len(directories) == 1:
            sync_one(directories[0])
        else:  # a multi-table commit's metadata files: one directory per table
            _run_all(sync_one, [(directory,) for directory in directories])

    def new_output_stream(self, location: str) -> OutputStream:
        """A binary sink for a streaming write (e.g. ``pyarrow.parquet.ParquetWriter``);
        the file is complete (and, locally, fsynced) once the stream is closed. Errors
        raised while writing are plain ``OSError``s."""
        _announce((location,))
        fs, path = self.resolve(location)
        with _mapped(location, "open for writing"):
            if fs is self._local:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                raw = io.FileIO(path, "w")
                return LocalOutputStream(raw, path, self._fsync)
            stream: OutputStream = fs.open_output_stream(path)
            return stream

    def replace_tail(self, location: str, keep: int, tail: bytes) -> bool:
        """Make the local file ``location`` its first ``keep`` bytes followed by ``tail``,
        in place (durable as ``write`` makes a file). For files nothing names yet (a
        task's file before its commit): a reader in between would see a mix. False, with
        nothing changed, when ``location`` is not local (an object cannot change in place)."""
        fs, path = self.resolve(location)
        if fs is not self._local:
            return False
        with _mapped(location, "write"):
            fd = os.open(path, os.O_WRONLY)
            try:
                view, at = memoryview(tail), keep
                while view:
                    written = os.pwrite(fd, view, at)
                    view, at = view[written:], at + written
                os.ftruncate(fd, keep + len(tail))
            except BaseException:
                os.close(fd)
                raise
            self._write_fd(fd, b"", kept_path=path)  # fsyncs (or keeps for its group), closes
        return True

    def create_exclusive(self, location: str, data: bytes) -> None:
        """Create ``location`` holding ``data`` only if no file has that name; otherwise
        ``FileAlreadyExistsError`` and nothing changes. Readers never see a partial file:
        the bytes go to a hidden temporary file first, which is then hard-linked to the
        name (``link`` fails if the name exists; it never replaces). Filesystems without
        hard links fall back to ``O_CREAT | O_EXCL`` and write in place.

        Object stores: ``UnsupportedFeatureError`` (pyarrow offers no conditional put);
        tables there need a SQL catalog.
        """
        if scheme_of(location) != LOCAL_SCHEME:
            raise UnsupportedFeatureError(
                f"{location}: exclusive create is not available on object stores; "
                "tables on object storage need a SQL catalog (SQLite or PostgreSQL)"
            )
        _announce((location,))
        with _mapped(location, "create"):
            self._write_local(local_path(location), data, exclusive=True)

    def delete(self, location: str) -> None:
        """Delete a file; a file that is already gone is fine."""
        fs, path = self.resolve(location)
        try:
            with _mapped(location, "delete"):
                fs.delete_file(path)
        except FileNotFoundInTableError:
            pass

    # ------------------------------------------------------------ local helpers

    def _write_local(self, path: str, data: bytes, *, exclusive: bool) -> None:
        directory, name = os.path.split(path)
        os.makedirs(directory, exist_ok=True)
        if not exclusive:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            if not self._write_fd(fd, data, kept_path=path):
                self._sync_dir(directory)
            return
        tmp = os.path.join(directory, f".{name}.{uuid.uuid4().hex}.tmp")
        self._write_fd(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644), data)
        try:
            os.link(tmp, path)
        except FileExistsError:
            raise FileAlreadyExistsError(to_uri(path)) from None
        except OSError as err:
            if err.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV):
                raise
            self._create_in_place(path, data)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        self._sync_dir(directory)

    def _create_in_place(self, path: str, data: bytes) -> None:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            raise FileAlreadyExistsError(to_uri(path)) from None
        self._write_fd(fd, data)

    def _write_fd(self, fd: int, data: bytes, kept_path: str | None = None) -> bool:
        """Write and fsync; True when the fsync (and the directory's) was left to this
        thread's ``io_sync`` group (only with ``kept_path``, the file's path)."""
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if self._fsync:
                if kept_path is not None and keep_for_sync(fd, kept_path):
                    return True
                os.fsync(fd)
            return False
        finally:
            os.close(fd)

    def _sync_dir(self, directory: str) -> None:
        if self._fsync:
            fsync_dir(directory)


_POOL_WORKERS = 8  # I/O-bound: fsyncs and object-store puts release the GIL


def _run_all(fn: Any, calls: Sequence[tuple[Any, ...]]) -> None:
    """``fn(*args)`` for every args tuple on the shared I/O pool; the first error raised
    (after every call has finished) propagates."""
    pool = shared_pool("calving-io", _POOL_WORKERS)
    futures = [pool.submit(fn, *args) for args in calls]
    errors = [f.exception() for f in futures]
    for error in errors:
        if error is not None:
            raise error


@contextlib.contextmanager
def _mapped(location: str, action: str) -> Iterator[None]:
    """Storage errors as calving errors: not-found apart, everything else transient."""
    try:
        yield
    except CalvingError:
        raise
    except FileNotFoundError as err:
        raise FileNotFoundInTableError(location) from err
    except (OSError, pa.ArrowException) as err:
        raise FileIOError(f"{location}: {action} failed: {err}") from err
