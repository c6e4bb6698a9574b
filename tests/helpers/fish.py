"""The fish shell for the completion test: the one on PATH, else Debian's packages (fish,
fish-common, libpcre2-32-0) fetched with `apt-get download` and unpacked with `dpkg-deb -x` into
the git-ignored .cache/fish (nothing installed on the system), one test process at a time under
a lock file. Returns the command to run it with."""
from __future__ import annotations

import fcntl
import os
import shutil
import subprocess

from helpers.paths import REPO

FISH_DIR = REPO / ".cache" / "fish"
PACKAGES = ("fish", "fish-common", "libpcre2-32-0")


def fish() -> tuple[list[str], dict[str, str]]:
    """(argv prefix, extra environment) that run fish."""
    found = shutil.which("fish")
    if found:
        return [found], {}
    exe = FISH_DIR / "root" / "usr" / "bin" / "fish"
    FISH_DIR.mkdir(parents=True, exist_ok=True)
    with open(FISH_DIR.parent / "fish.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not exe.exists():
            for tool in ("apt-get", "dpkg-deb"):
                if shutil.which(tool) is None:
                    raise RuntimeError(f"the fish completion test needs fish on PATH, or {tool} to fetch Debian's package")
            debs = FISH_DIR / "debs"
            debs.mkdir(exist_ok=True)
            subprocess.run(["apt-get", "download", *PACKAGES], cwd=debs, check=True, capture_output=True, timeout=300)
            staging = FISH_DIR / "root.partial"
            shutil.rmtree(staging, ignore_errors=True)
            for deb in sorted(debs.glob("*.deb")):
                subprocess.run(["dpkg-deb", "-x", str(deb), str(staging)], check=True, capture_output=True, timeout=120)
            os.replace(staging, FISH_DIR / "root")
    libs = [str(p) for p in (FISH_DIR / "root" / "usr" / "lib").glob("*-linux-gnu")]
    env = {"LD_LIBRARY_PATH": os.pathsep.join(libs + [os.environ.get("LD_LIBRARY_PATH", "")]).rstrip(os.pathsep)}
    return [str(exe)], env
