"""A view of a root with some files taken as absent: how `align` inspects a checkpoint as it
will be once the plan has moved its torn files aside (docs/model.md#physical-damage).

Only the listing and the reads of those files change; everything else is the root's own
Storage. Read-only like Storage itself."""
from __future__ import annotations

from typing import Any, Iterable, Optional

from streamctl.formats.errors import StorageError
from streamctl.inspectors.storage import Entry, Storage


class MaskedStorage(Storage):
    def __init__(self, base: Storage, absent: Iterable[str]) -> None:
        self.__dict__.update(base.__dict__)
        self.absent = frozenset(a.strip("/") for a in absent)

    def _hidden(self, folder: str, name: str) -> bool:
        folder = folder.strip("/")
        return (f"{folder}/{name}" if folder else name) in self.absent

    def list_dir(self, rel: str = "") -> Optional[list[Entry]]:
        entries = super().list_dir(rel)
        if entries is None or not self.absent:
            return entries
        return [e for e in entries if not self._hidden(rel, e.name)]

    def list_names(self, rel: str = "") -> tuple[list[str], list[str]]:
        files, dirs = super().list_names(rel)
        if not self.absent:
            return files, dirs
        return [n for n in files if not self._hidden(rel, n)], [n for n in dirs if not self._hidden(rel, n)]

    def lookup(self, rel: str = "") -> Optional[Entry]:
        return None if rel.strip("/") in self.absent else super().lookup(rel)

    def read(self, rel: str, *args: Any, **kwargs: Any) -> bytes:
        if rel.strip("/") in self.absent:
            raise StorageError(self.uri(rel), "does not exist")
        return super().read(rel, *args, **kwargs)


def masked(st: Storage, absent: Iterable[str]) -> Storage:
    absent = frozenset(absent)
    return MaskedStorage(st, absent) if absent else st
