"""File access through pyarrow.fs: local paths now, S3-compatible stores by scheme.

Local locations are written as ``file:///abs/path`` URIs (iceberg-rust requires a URL;
pyiceberg and DuckDB accept it); plain absolute paths are accepted on input. Credentials for
object stores come from the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY),
never from code or logs.
"""

from __future__ import annotations

import os
from typing import Mapping
from urllib.parse import urlparse

import pyarrow.fs as pafs

from commit.errors import FileAlreadyExistsError, FileIOError, UnsupportedFeatureError


class FileNotFound(FileIOError):
    """The location does not exist (retrying will not help, but it is not corrupt data)."""

    retryable = False


def normalize(location: str) -> str:
    """The path pyarrow's local filesystem wants for a ``file://`` URI."""
    if location.startswith("file://"):
        return urlparse(location).path
    return location


def to_uri(location: str) -> str:
    """Canonical location form written into metadata: ``file:///abs`` for local
    paths (every reader, iceberg-rust included, accepts it), unchanged otherwise."""
    if location.startswith("/"):
        return "file://" + location
    return location


class FileIO:
    def __init__(self, properties: Mapping[str, str] | None = None) -> None:
        self.properties = dict(properties or {})
        self._s3: pafs.FileSystem | None = None

    @staticmethod
    def for_location(location: str, properties: Mapping[str, str] | None = None) -> "FileIO":
        return FileIO(properties)

    def _fs(self, location: str) -> tuple[pafs.FileSystem, str]:
        location = normalize(location)
        scheme = urlparse(location).scheme
        if scheme in ("s3", "s3a"):
            if self._s3 is None:
                p = self.properties
                self._s3 = pafs.S3FileSystem(
                    endpoint_override=p.get("s3.endpoint"),
                    region=p.get("s3.region"),
                    access_key=p.get("s3.access-key-id") or os.environ.get("AWS_ACCESS_KEY_ID"),
                    secret_key=p.get("s3.secret-access-key")
                    or os.environ.get("AWS_SECRET_ACCESS_KEY"),
                )
            parsed = urlparse(location)
            return self._s3, parsed.netloc + parsed.path
        if scheme:
            raise UnsupportedFeatureError(f"unsupported storage scheme {scheme!r} in {location}")
        return pafs.LocalFileSystem(), location

    def read(self, location: str) -> bytes:
        fs, path = self._fs(location)
        try:
            with fs.open_input_file(path) as f:
                return f.read()
        except FileNotFoundError:
            raise FileNotFound(f"{location}: no such file") from None
        except OSError as exc:
            raise FileIOError(f"{location}: read failed: {exc}") from None

    def read_range(self, location: str, offset: int, length: int) -> bytes:
        fs, path = self._fs(location)
        try:
            with fs.open_input_file(path) as f:
                return f.read_at(length, offset)
        except FileNotFoundError:
            raise FileNotFound(f"{location}: no such file") from None
        except OSError as exc:
            raise FileIOError(f"{location}: read failed: {exc}") from None

    def exists(self, location: str) -> bool:
        fs, path = self._fs(location)
        return fs.get_file_info(path).type != pafs.FileType.NotFound

    def size(self, location: str) -> int:
        fs, path = self._fs(location)
        info = fs.get_file_info(path)
        if info.type == pafs.FileType.NotFound:
            raise FileNotFound(f"{location}: no such file")
        return int(info.size)

    def write(self, location: str, data: bytes) -> None:
        """Write a new file under a unique name (callers never reuse names)."""
        fs, path = self._fs(location)
        try:
            parent = path.rsplit("/", 1)[0]
            if parent:
                fs.create_dir(parent, recursive=True)
            with fs.open_output_stream(path) as f:
                f.write(data)
        except OSError as exc:
            raise FileIOError(f"{location}: write failed: {exc}") from None

    def create_exclusive(self, location: str, data: bytes) -> None:
        """Create the file only if absent; the atomic step of the filesystem catalog."""
        location = normalize(location)
        if urlparse(location).scheme:
            raise UnsupportedFeatureError(
                f"{location}: exclusive create is only available on local filesystems; use a "
                "SQL catalog for tables on object stores"
            )
        os.makedirs(os.path.dirname(location), exist_ok=True)
        try:
            fd = os.open(location, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            raise FileAlreadyExistsError(location) from None
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)

    def delete(self, location: str) -> None:
        fs, path = self._fs(location)
        try:
            fs.delete_file(path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise FileIOError(f"{location}: delete failed: {exc}") from None

    def list_prefix(self, prefix: str) -> list[str]:
        fs, path = self._fs(prefix)
        try:
            infos = fs.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True))
        except OSError as exc:
            raise FileIOError(f"{prefix}: list failed: {exc}") from None
        scheme = urlparse(normalize(prefix)).scheme
        out = []
        for i in infos:
            if i.type == pafs.FileType.File:
                out.append(f"{scheme}://{i.path}" if scheme else to_uri(i.path))
        return sorted(out)
