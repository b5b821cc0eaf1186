"""A cache in a local directory: one file per key, atomic rename, an fcntl lock per key for CAS."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import tempfile
from pathlib import Path

from .base import CREATE_ONLY, QUARANTINE, Cache, CacheConflict, CacheUnavailable, check_key
from .util import quarantine_stamp

_FIX = ("give a writable directory (the cache argument of tune(), @intune or the operator, "
        "or $INTUNE_FLOW_CACHE)")
SUFFIX = ".rec"      # data files end in .rec, so key "a" (a file) and "a/b" (under a dir) coexist
_LOCKS = ".locks"


def version_of(data: bytes) -> str:
    """The version token of stored bytes: a content hash (the same bytes are the same version)."""
    return hashlib.sha256(data).hexdigest()[:32]


class LocalCache(Cache):
    """Records as files under ``root``. Safe between threads and processes on one machine.

    A put writes a temp file in the same directory, fsyncs it, ``os.replace``-s it over
    the target and fsyncs the directory, so a reader (or a crash) only ever sees a whole
    file. Conditional puts hold a per-key ``flock`` while they compare and replace.
    """

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root).expanduser().absolute()
        self.uri = str(self.root)

    # -- paths ---------------------------------------------------------------------------
    def _path(self, key: str) -> Path:
        return self.root / (check_key(key) + SUFFIX)

    def _ensure_root(self) -> None:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CacheUnavailable(f"cannot create the cache directory {self.root}: {exc}; "
                                   f"{_FIX}") from exc

    @contextlib.contextmanager
    def _lock(self, key: str):
        self._ensure_root()
        locks = self.root / _LOCKS
        locks.mkdir(exist_ok=True)
        path = locks / (hashlib.sha256(key.encode()).hexdigest()[:32] + ".lock")
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    # -- interface -------------------------------------------------------------------------
    def get(self, key: str) -> tuple[bytes, str] | None:
        path = self._path(key)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        except NotADirectoryError as exc:
            # A file where the cache's directory should be: the cache is unusable, not
            # empty. Raising lets the run read and write one fallback cache instead of
            # missing here every night and writing there.
            raise CacheUnavailable(f"cannot use {self.root} as a cache directory: a file is in "
                                   f"its path ({exc.strerror}); {_FIX}") from exc
        except OSError as exc:
            raise CacheUnavailable(f"cannot read {path}: {exc}") from exc
        return data, version_of(data)

    def _current_version(self, path: Path) -> str | None:
        try:
            return version_of(path.read_bytes())
        except (FileNotFoundError, NotADirectoryError):
            return None

    def _write_atomic(self, path: Path, data: bytes) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)

    def put(self, key: str, data: bytes, *, if_version: str | None = None) -> str:
        path = self._path(key)
        data = bytes(data)
        try:
            with self._lock(key):
                if if_version is not None:
                    current = self._current_version(path)
                    if if_version == CREATE_ONLY and current is not None:
                        raise CacheConflict(f"{key!r} already exists")
                    if if_version != CREATE_ONLY and current != if_version:
                        raise CacheConflict(f"{key!r} changed since version {if_version}")
                self._write_atomic(path, data)
        except OSError as exc:
            raise CacheUnavailable(f"cannot write {path}: {exc}; check the directory's "
                                   "permissions and free space") from exc
        return version_of(data)

    def list(self, prefix: str = "") -> list[str]:
        if not self.root.is_dir():
            return []
        keys = []
        for dirpath, dirnames, filenames in os.walk(self.root):
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]
            rel = os.path.relpath(dirpath, self.root)
            for name in filenames:
                if name.endswith(SUFFIX) and not name.startswith("."):
                    key = name[:-len(SUFFIX)] if rel == "." else f"{rel}/{name[:-len(SUFFIX)]}"
                    key = key.replace(os.sep, "/")
                    if key.startswith(prefix):
                        keys.append(key)
        return sorted(keys)

    def delete(self, key: str) -> bool:
        path = self._path(key)
        with self._lock(key):
            try:
                path.unlink()
            except FileNotFoundError:
                return False
            path.with_suffix(".reason").unlink(missing_ok=True)  # a quarantined copy's note
            with contextlib.suppress(OSError):
                path.parent.rmdir()                              # only if now empty
            return True

    def quarantine(self, key: str, reason: str, *, if_version: str | None = None) -> str | None:
        path = self._path(key)
        qkey = f"{key}{QUARANTINE}{quarantine_stamp()}"
        qpath = self._path(qkey)
        with self._lock(key):
            current = self._current_version(path)
            if current is None or (if_version is not None and current != if_version):
                return None
            qpath.parent.mkdir(parents=True, exist_ok=True)
            qpath.with_suffix(".reason").write_text(reason[:4000])
            os.replace(path, qpath)
        return qkey
