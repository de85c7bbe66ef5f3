"""Several Parquet data files rewritten as one, rows unchanged: what the jobs' coalescing
(``pipelines.coalesce``) and ``factory compact`` (``lakehouse.compact``) both write."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from lakehouse.local_files import sync_file, sync_folders
from lakehouse.row_groups import ROW_GROUP_BYTES, RowGroupWriter


def combine_files(
    sources: Sequence[str],
    dest: str,
    schema: pa.Schema,
    io_properties: Mapping[str, str],
    compression: str = "zstd",
    group_bytes: int = ROW_GROUP_BYTES,
) -> tuple[int, int]:
    """Write the rows of ``sources``, in order, row group by row group (so memory holds one row
    group and the sizes add up), to the new file ``dest`` with ``schema``, cut into row groups
    of ``group_bytes`` (``lakehouse.row_groups``); make it durable before returning its rows and
    bytes. On failure ``dest`` is removed and the sources are untouched."""
    from pyiceberg.io.pyarrow import PyArrowFileIO

    io = PyArrowFileIO(dict(io_properties))
    stream = io.new_output(dest).create()
    writer = RowGroupWriter(stream, schema, group_bytes, compression)
    records = 0
    try:
        for source in sources:
            parquet = pq.ParquetFile(io.new_input(source).open())
            for group in range(parquet.metadata.num_row_groups):
                table = parquet.read_row_group(group).cast(schema)
                writer.write_table(table)
                records += table.num_rows
        writer.close()
        size = stream.tell()
        stream.close()
        make_durable(dest)
    except BaseException:
        with contextlib.suppress(Exception):
            writer.close()
        with contextlib.suppress(Exception):
            stream.close()
        with contextlib.suppress(Exception):
            io.delete(dest)
        raise
    return records, size


def make_durable(path: str) -> None:
    """Sync a written local file and the folders made for it before a commit may reference it.

    Object stores need nothing: an object appears only once its upload has completed."""
    if "://" in path and not path.startswith("file://"):
        return
    local = path.removeprefix("file://")
    sync_file(local)
    sync_folders(local)
