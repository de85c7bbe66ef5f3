"""The driver JVM's options for a session started in this process: its compiler, and the
class-data-sharing archive that ``python -m factory_cli.spark_classes`` builds (see there why)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from lakehouse.errors import InputError

# A session started in this process (the `factory` command on a laptop, CI, the tests) runs many
# short Spark jobs: the JVM's optimising C2 compiler spends seconds of CPU compiling Catalyst's
# and Spark's generated code that then runs for milliseconds, on the cores the Python workers
# need. Stopping at C1, which compiles quickly, measured on 2 cores: dedup of 200 MB 32 s → 27.5 s.
# A long JVM-bound run may prefer C2's faster code: FACTORY_SPARK_JIT=full.
JIT_OPTIONS = {"quick": "-XX:TieredStopAtLevel=1", "full": ""}

DEFAULT_ARCHIVE = Path(sys.prefix) / "share" / "factory" / "spark-classes.jsa"


def archive_path() -> Path | None:
    """The archive sessions use: ``$FACTORY_SPARK_CLASSES``, else the default; None when off."""
    setting = os.environ.get("FACTORY_SPARK_CLASSES", "")
    if setting.lower() in ("off", "none", "0"):
        return None
    return Path(setting) if setting else DEFAULT_ARCHIVE


def java_options() -> str:
    """The driver JVM options that map the archive in ("" when there is none), or, while
    ``build`` runs its workload (``$FACTORY_SPARK_DUMP_CLASSES``), that dump one."""
    quiet = "-Xlog:cds=off -Xlog:cds+dynamic=off"
    dump = os.environ.get("FACTORY_SPARK_DUMP_CLASSES")
    if dump:
        return f"-XX:ArchiveClassesAtExit={dump} {quiet}"
    path = archive_path()
    if path is None or not path.is_file():
        return ""
    return f"-XX:SharedArchiveFile={path} {quiet}"


def jit_options() -> str:
    """The JVM's compiler options for an in-process session, from ``$FACTORY_SPARK_JIT`` (default quick)."""
    setting = os.environ.get("FACTORY_SPARK_JIT", "quick").strip().lower() or "quick"
    if setting not in JIT_OPTIONS:
        raise InputError(
            f"FACTORY_SPARK_JIT must be one of {', '.join(JIT_OPTIONS)} (C1 only, or the JVM's default), got {setting!r}"
        )
    return JIT_OPTIONS[setting]
