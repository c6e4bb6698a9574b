"""A local file's size and sha256, read the way every backup digest is made: a small file in one
read, a named pipe or device never read (its digest stands for its kind)."""
from __future__ import annotations

import errno
import hashlib
import os
import stat
from typing import Optional

from streamctl.operations.object_store import CHUNK

_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
HASH_THREADS = 4  # large local files read and hashed at once (reads and sha256 release the GIL)
THREADED_FROM = 1 << 20  # bytes: smaller files are hashed in one loop (threads cost them more than they save)


def hash_file(path: str) -> tuple[int, str]:
    """(size, sha256 hex) of a local file; a folder raises IsADirectoryError. A named pipe, socket
    or device where a file belongs (damage align moves aside) is never read: its digest stands
    for its kind, and it opens without waiting for a writer (O_NONBLOCK)."""
    got = _hash_file(path, None)
    assert got is not None  # no size limit: always a digest
    return got


def _hash_file(path: str, limit: Optional[int]) -> Optional[tuple[int, str]]:
    """`hash_file`, or None (nothing read) for a regular file larger than `limit`. Read with
    `os.read` until a read returns less than it asked, the first read as large as the file's
    size + 1: a small file costs one read of its size, not of CHUNK."""
    fd = os.open(path, os.O_RDONLY | _NONBLOCK)
    try:
        st = os.fstat(fd)
        mode = st.st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
        if not stat.S_ISREG(mode):
            return 0, hashlib.sha256(b"not a regular file: " + stat.filemode(mode)[:1].encode()).hexdigest()
        if limit is not None and st.st_size > limit:
            return None
        h = hashlib.sha256()
        size = 0
        want = st.st_size + 1 if st.st_size < CHUNK else CHUNK
        while True:
            block = os.read(fd, want)
            size += len(block)
            h.update(block)
            if len(block) < want:  # a short read of a regular file: its end (a small file: one read)
                return size, h.hexdigest()
            want = CHUNK  # more than fstat said (the file grows), or a large file: whole chunks
    finally:
        os.close(fd)
