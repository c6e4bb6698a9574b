"""The reads an inspection of one checkpoint makes: small files read once (prefetched
concurrently on object stores), parsed, and an UNREADABLE finding for each that cannot be read.
`CheckpointReads` holds what the families of findings share (the storage, the findings so far,
the restore chains); `inspectors/checkpoint.py`'s inspector is made of it and of them."""
from __future__ import annotations

from typing import Any, Callable, Optional

from streamctl.formats.errors import StreamctlError
from streamctl.inspectors.chains import Chains
from streamctl.inspectors.findings import Finding
from streamctl.inspectors.logs import LogListing, list_log
from streamctl.inspectors.storage import Storage

READ_WORKERS = 8  # concurrent reads of small files on object stores

Progress = Callable[[str], None]


class CheckpointReads:
    def __init__(self, storage: Storage, progress: Optional[Progress], quiet_period_s: Optional[float] = None,
                 now_ms: Optional[int] = None, deep: bool = False, target_spark: Optional[tuple[int, int]] = None) -> None:
        self.st = storage
        self.target_spark = target_spark
        self.chains = Chains(storage, deep)  # what each store restores; its chain's files judged
        self.read_ends = self.chains.read_ends  # torn state files: judged by their heads and tails
        self.findings: list[Finding] = []
        self.progress = progress or (lambda _msg: None)
        self.quiet_period_s = quiet_period_s
        self.now_ms = now_ms
        self.lease_record: Optional[dict[str, Any]] = None
        self.fetched: dict[str, Any] = {}  # rel -> bytes or the StreamctlError of its read
        self.prepared: dict[tuple[int, int, str], Any] = {}  # read_state's _prepare results
        self.judged: dict[tuple[int, int, str], Any] = {}  # _judge of the prepared statuses taken

    def unreadable(self, exc: StreamctlError) -> None:
        path = getattr(exc, "path", self.st.display)
        reason = getattr(exc, "reason", str(exc))
        self.findings.append(Finding("UNREADABLE", f"{path}: {reason}", details={"path": path, "reason": reason}))

    def read(self, rel: str, parse: Callable[[bytes, str], Any], quietly: bool = False) -> Any:
        """`parse` of `rel` (prefetched or read now); None when it cannot be read, recorded as
        UNREADABLE unless `quietly` (a file no restart reads: damage there is no finding)."""
        try:
            data = self.fetched.get(rel)
            if isinstance(data, StreamctlError):
                raise data
            if data is None:
                data = self.st.read(rel)
            return parse(data, self.st.uri(rel))
        except StreamctlError as exc:
            if not quietly:
                self.unreadable(exc)
            return None

    def _try_read(self, rel: str) -> Any:
        try:
            return self.st.read(rel)
        except StreamctlError as exc:
            return exc

    def concurrently(self, *calls: Callable[[], Any]) -> list[Any]:
        """Run `calls` and return their results in order. On object stores they run at once on a
        small thread pool (each request waits for a round trip); locally one after another, which
        is faster. An exception is raised when its result is taken, in order, as sequential
        calls would raise it."""
        if self.st.is_local or len(calls) < 2:
            return [call() for call in calls]
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=min(READ_WORKERS, len(calls))) as pool:
            futures = [pool.submit(call) for call in calls]
            return [f.result() for f in futures]

    def prefetch(self, rels: list[str]) -> None:
        """On object stores, read the small files `rels` concurrently; `read` then parses them
        in the usual order (same findings, same order). A no-op locally."""
        todo = [r for r in dict.fromkeys(rels) if r not in self.fetched]
        if self.st.is_local or len(todo) < 2:
            return
        results = self.concurrently(*[lambda r=r: self._try_read(r) for r in todo])
        self.fetched.update(zip(todo, results, strict=True))

    def log_listing(self, rel: str) -> LogListing:
        return list_log(self.st, rel)

