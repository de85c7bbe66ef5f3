"""On a cluster, the executors' Python workers run the code the driver runs.

A job's Python tasks import ``pipelines``, ``quality`` and ``lakehouse`` on the executors. On a
Spark standalone, YARN or Kubernetes cluster, whatever the workers happen to have installed is
what they import: an older image, another checkout (measured here: a worker started from another
worktree imported that worktree's ``pipelines`` while the driver ran this one). Every snapshot
records the driver's code version, so the executors must run exactly the driver's code. The
driver zips the packages it imported and adds the archive with ``addPyFile``: pyspark puts it at
the front of each Python worker's ``sys.path``, ahead of site-packages (and of an editable
install's finder, which comes after the path finder). A local session shares the driver's
interpreter and files, and is left alone.
"""

from __future__ import annotations

import hashlib
import importlib
import io
import tempfile
import zipfile
from pathlib import Path

from pyspark.sql import SparkSession

# The packages a Spark task imports: the floors below and at pipelines/ (docs/architecture.md).
TASK_PACKAGES = ("lakehouse", "quality", "mixtures", "pipelines")

# A fixed timestamp: the same code makes the same archive, and so the same name.
_EPOCH = (1980, 1, 1, 0, 0, 0)


def code_archive(packages: tuple[str, ...] = TASK_PACKAGES) -> bytes:
    """A zip of ``packages`` as this process imports them (sources and data files, no caches)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name in packages:
            root = Path(importlib.import_module(name).__file__).parent
            for path in sorted(root.rglob("*")):
                if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                    info = zipfile.ZipInfo(f"{name}/{path.relative_to(root).as_posix()}", _EPOCH)
                    info.compress_type = zipfile.ZIP_DEFLATED
                    archive.writestr(info, path.read_bytes())
    return buffer.getvalue()


def ship_code(spark: SparkSession, packages: tuple[str, ...] = TASK_PACKAGES) -> Path | None:
    """Add the driver's code to a cluster session's Python workers; the archive (None when local).

    ``packages``: more than the tasks' floors, for a job above them whose tasks import its own
    code (the RL environment's builder)."""
    context = spark.sparkContext
    if context.master.startswith("local"):
        return None
    data = code_archive(packages)
    # Named by content: Spark refuses a second file of one name with other bytes.
    folder = Path(tempfile.mkdtemp(prefix="factory-code-"))
    path = folder / f"factory-code-{hashlib.sha256(data).hexdigest()[:16]}.zip"
    path.write_bytes(data)
    context.addPyFile(str(path))
    return path
