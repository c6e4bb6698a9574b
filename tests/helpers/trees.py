"""Snapshots of a folder tree, to prove what an operation changed (or that it changed nothing)."""
from __future__ import annotations

import hashlib
import os
from pathlib import Path


def tree(base: Path) -> dict[str, str]:
    """relative path -> sha256 of each file below base (symlinks: "link:" + their target, not followed)."""
    out: dict[str, str] = {}
    for dirpath, dirs, files in os.walk(base):
        for f in files + [d for d in dirs if os.path.islink(os.path.join(dirpath, d))]:
            p = Path(dirpath) / f
            out[str(p.relative_to(base))] = ("link:" + os.readlink(p)) if p.is_symlink() else \
                hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def snapshot_tree(root: Path) -> dict[str, tuple[int, int]]:
    """path -> (size, mtime_ns) of every file below root (to prove nothing was written)."""
    out = {}
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            p = Path(dirpath) / f
            try:
                st = p.lstat()
            except OSError:
                continue
            out[str(p.relative_to(root))] = (st.st_size, st.st_mtime_ns)
    return out
