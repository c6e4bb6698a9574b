"""Writable roots: the only place where streamctl changes files.

A `Root` is one folder the user named (the checkpoint, the sink, the backup folder). Every path
passed to it is relative and is checked to stay inside the root, so no step can touch a path
outside the roots the user named. Local folders use `os` (atomic renames, exclusive create);
other file systems go through `pyarrow.fs` (moves are copy -> verify -> delete).
"""
from __future__ import annotations

import errno
import hashlib
import os
import re
import shutil
import stat
import struct
import zlib
from typing import Any, Optional

from streamctl.inspectors.errors import StorageError
from streamctl.inspectors.storage import Storage

CHUNK = 1 << 20
_NOT_NORMAL = re.compile(r"(^|/)\.{0,2}(/|$)|\\")  # a leading, trailing or double "/", a "." or ".." part, a backslash


def hadoop_crc(data: bytes, bytes_per_checksum: int = 512) -> bytes:
    """The content of Hadoop's hidden `.<name>.crc` sidecar for a file holding `data`
    (ChecksumFileSystem: magic `crc\\0`, bytes-per-checksum, one big-endian CRC32 per chunk)."""
    out = [b"crc\x00", struct.pack(">i", bytes_per_checksum)]
    for i in range(0, len(data), bytes_per_checksum):
        out.append(struct.pack(">I", zlib.crc32(data[i:i + bytes_per_checksum]) & 0xFFFFFFFF))
    return b"".join(out)


def crc_name(rel: str) -> str:
    """`offsets/3` -> `offsets/.3.crc`."""
    head, _, name = rel.rpartition("/")
    return f"{head}/.{name}.crc" if head else f".{name}.crc"


def check_rel(rel: str, where: str) -> str:
    """A relative, normalised path that cannot leave its root."""
    if rel and _NOT_NORMAL.search(rel) is None:  # already normal: the usual case, fast
        return rel
    parts = [p for p in rel.replace("\\", "/").split("/") if p not in ("", ".")]
    if not parts or any(p == ".." for p in parts) or rel.startswith("/"):
        raise StorageError(f"{where}/{rel}", "refusing a path outside the root")
    return "/".join(parts)


class Root:
    """One writable root folder (local path or URI)."""

    def __init__(self, name: str, location: str) -> None:
        self.name = name
        self.storage = Storage.open(location)
        self.location = self.storage.display
        self._fs = None
        self._fs_root = ""
        self._made: set[str] = set()  # local folders this root made or found (moves skip makedirs)
        if not self.storage.is_local:
            self._fs = self.storage._fs  # noqa: SLF001 - same package family, one opener
            self._fs_root = self.storage._fs_root  # noqa: SLF001

    @property
    def is_local(self) -> bool:
        return self.storage.is_local

    def uri(self, rel: str) -> str:
        return self.storage.uri(rel)

    def local(self, rel: str) -> str:
        rel = check_rel(rel, self.location)
        if os.sep == "/":
            return f"{self.location.rstrip('/')}/{rel}" if self.location != "/" else f"/{rel}"
        return os.path.join(self.location, *rel.split("/"))

    def _remote(self, rel: str) -> str:
        rel = check_rel(rel, self.location)
        return f"{self._fs_root}/{rel}" if self._fs_root else rel

    # -- queries --------------------------------------------------------------------------
    def exists(self, rel: str) -> bool:
        return self.kind(rel) != "missing"

    def kind(self, rel: str) -> str:
        if self.is_local:
            path = self.local(rel)
            try:
                mode = os.lstat(path).st_mode
            except FileNotFoundError:
                return "missing"
            except OSError as exc:
                raise StorageError(self.uri(rel), exc.strerror or str(exc)) from None
            if stat.S_ISLNK(mode):
                return "dir" if os.path.isdir(path) else "file"
            return "dir" if stat.S_ISDIR(mode) else "file"
        import pyarrow.fs as pafs

        info = self._fs.get_file_info(self._remote(rel))  # type: ignore[union-attr]
        if info.type == pafs.FileType.NotFound:
            return "missing"
        return "dir" if info.type == pafs.FileType.Directory else "file"

    def read(self, rel: str) -> bytes:
        check_rel(rel, self.location)
        return self.storage.read(rel)

    def digest_if_exists(self, rel: str) -> Optional[tuple[int, str]]:
        """(size, sha256) of a file or folder, None when nothing is there; a local file costs one
        open (no separate existence check)."""
        if self.is_local:
            try:
                with open(self.local(rel), "rb") as fh:
                    return _hash_stream(fh)
            except FileNotFoundError:
                return None
            except IsADirectoryError:
                pass
            except OSError as exc:
                raise StorageError(self.uri(rel), exc.strerror or str(exc)) from None
        return self.digest(rel) if self.exists(rel) else None

    def sync_parents(self, rels: "list[str] | set[str]") -> None:
        """Make renames, creates and deletes of these paths durable: fsync each distinct parent
        folder and its ancestors up to the root (local only; object-store calls are durable when
        they return)."""
        if not self.is_local:
            return
        top = os.path.normpath(self.location)
        dirs: set[str] = set()
        for rel in rels:
            d = os.path.dirname(self.local(rel))
            while d not in dirs and len(d) >= len(top):
                dirs.add(d)
                if os.path.normpath(d) == top:
                    break
                d = os.path.dirname(d)
        for d in sorted(dirs):
            _fsync_dir(d)

    def digest(self, rel: str) -> tuple[int, str]:
        """(size, sha256 hex) of a file, or of a folder (over its sorted relative names and file digests)."""
        if self.kind(rel) == "dir":
            h = hashlib.sha256()
            total = 0
            for sub in self.walk_files(rel):
                size, digest = self.digest(f"{rel}/{sub}")
                total += size
                h.update(f"{sub}\0{size}\0{digest}\n".encode())
            return total, h.hexdigest()
        if self.is_local:
            try:
                with open(self.local(rel), "rb") as fh:
                    return _hash_stream(fh)
            except OSError as exc:
                raise StorageError(self.uri(rel), exc.strerror or str(exc)) from None
        with self._fs.open_input_stream(self._remote(rel)) as fh:  # type: ignore[union-attr]
            return _hash_stream(fh)

    def walk_files(self, rel: str) -> list[str]:
        """Files under folder `rel`, relative to it, sorted."""
        out: list[str] = []
        if self.is_local:
            base = self.local(rel)
            for dirpath, _dirs, files in os.walk(base):
                for f in files:
                    out.append(os.path.relpath(os.path.join(dirpath, f), base).replace(os.sep, "/"))
            return sorted(out)
        import pyarrow.fs as pafs

        base = self._remote(rel)
        sel = pafs.FileSelector(base, recursive=True, allow_not_found=True)
        for info in self._fs.get_file_info(sel):  # type: ignore[union-attr]
            if info.type == pafs.FileType.File:
                out.append(info.path[len(base):].lstrip("/"))
        return sorted(out)

    # -- changes --------------------------------------------------------------------------
    def write_atomic(self, rel: str, data: bytes) -> None:
        """Write a whole file so that readers see the old or the new content, never a part."""
        if self.is_local:
            path = self.local(rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            tmp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.streamctl.tmp")
            with open(tmp, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
            _fsync_dir(os.path.dirname(path))
            return
        with self._fs.open_output_stream(self._remote(rel)) as fh:  # type: ignore[union-attr]
            fh.write(data)

    def create_exclusive(self, rel: str, data: bytes) -> bool:
        """Create a file only if it does not exist (the lock). False when it exists."""
        if self.is_local:
            path = self.local(rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            try:
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                return False
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            return True
        if self.location.split("://", 1)[0].lower() in ("s3", "s3a", "s3n"):
            return self._s3_create_exclusive(rel, data)
        raise StorageError(self.uri(rel), "exclusive create (the lock) is supported on local file systems and S3 only")

    def _s3_create_exclusive(self, rel: str, data: bytes) -> bool:
        """S3 conditional write: PutObject with If-None-Match: * (412 when the key exists).
        Needs boto3 (`pip install 'streamctl[s3]'`); endpoint and region come from the URI's
        `endpoint_override`/`scheme`/`region` options or the usual AWS environment."""
        from urllib.parse import parse_qsl, urlparse

        try:
            import boto3
            from botocore.exceptions import ClientError
        except ImportError:
            raise StorageError(self.uri(rel), "changing files on S3 needs boto3 for the lock's conditional write "
                                              "(pip install 'streamctl[s3]')") from None
        parsed = urlparse(self.location)
        opts = dict(parse_qsl(parsed.query))
        endpoint = None
        if "endpoint_override" in opts:
            endpoint = f"{opts.get('scheme', 'https')}://{opts['endpoint_override']}"
        key_root = self._fs_root.split("/", 1)
        bucket, prefix = key_root[0], (key_root[1] if len(key_root) > 1 else "")
        key = f"{prefix}/{check_rel(rel, self.location)}" if prefix else check_rel(rel, self.location)
        client = boto3.client("s3", endpoint_url=endpoint, region_name=opts.get("region") or None)
        try:
            client.put_object(Bucket=bucket, Key=key, Body=data, IfNoneMatch="*")
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if code in ("PreconditionFailed", "ConditionalRequestConflict") or status in (409, 412):
                return False
            raise StorageError(self.uri(rel), f"conditional write failed: {code or status}") from None
        return True

    def delete(self, rel: str) -> None:
        if self.is_local:
            path = self.local(rel)
            try:
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path)
                else:
                    os.unlink(path)
            except FileNotFoundError:
                pass
            return
        if self.kind(rel) == "dir":
            self._fs.delete_dir(self._remote(rel))  # type: ignore[union-attr]
        elif self.kind(rel) == "file":
            self._fs.delete_file(self._remote(rel))  # type: ignore[union-attr]

    def move_to(self, rel: str, dest: "Root", dest_rel: str) -> None:
        """Move a file or folder into another root. Local: a rename when both are on one file
        system, else copy -> fsync -> verify -> delete. Remote: copy -> verify -> delete."""
        if self.is_local and dest.is_local:
            src, dst = self.local(rel), dest.local(dest_rel)
            parent = os.path.dirname(dst)
            if parent not in dest._made:  # one makedirs per folder, not per file
                os.makedirs(parent, exist_ok=True)
                dest._made.add(parent)
            try:
                try:
                    os.rename(src, dst)
                except FileNotFoundError:
                    if not os.path.lexists(src):
                        raise
                    os.makedirs(parent, exist_ok=True)  # the folder went away since (undo, cleanup)
                    os.rename(src, dst)
                return
            except OSError as exc:
                if exc.errno != errno.EXDEV:
                    raise StorageError(self.uri(rel), f"cannot move to {dst}: {exc.strerror}") from None
        self.copy_to(rel, dest, dest_rel)
        if self.digest(rel) != dest.digest(dest_rel):
            raise StorageError(dest.uri(dest_rel), "copy differs from its source; source kept")
        self.delete(rel)

    def copy_to(self, rel: str, dest: "Root", dest_rel: str) -> None:
        if self.kind(rel) == "dir":
            for sub in self.walk_files(rel):
                self.copy_to(f"{rel}/{sub}", dest, f"{dest_rel}/{sub}")
            return
        if self.is_local and dest.is_local:
            dst = dest.local(dest_rel)
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copy2(self.local(rel), dst)
            with open(dst, "rb+") as fh:
                os.fsync(fh.fileno())
            return
        dest.write_atomic(dest_rel, self.read_all(rel))

    def read_all(self, rel: str) -> bytes:
        if self.is_local:
            with open(self.local(rel), "rb") as fh:
                return fh.read()
        with self._fs.open_input_stream(self._remote(rel)) as fh:  # type: ignore[union-attr]
            return fh.read()

    def remove_empty_dirs(self, rel: str) -> None:
        """Remove `rel` and its parents while they are empty folders (local only)."""
        if not self.is_local:
            return
        path = self.local(rel)
        while os.path.normpath(path) != os.path.normpath(self.location):
            try:
                os.rmdir(path)
            except OSError:
                return
            path = os.path.dirname(path)


def _hash_stream(fh: Any) -> tuple[int, str]:
    h = hashlib.sha256()
    size = 0
    while True:
        block = fh.read(CHUNK)
        if not block:
            return size, h.hexdigest()
        size += len(block)
        h.update(block)


def _fsync_dir(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def maybe_digest(root: Root, rel: str) -> Optional[tuple[int, str]]:
    return root.digest(rel) if root.exists(rel) else None
