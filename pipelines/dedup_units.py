"""Dedup's features pass as Python tasks over the pinned snapshots' read units.

The features (exact key, length, band hashes) are computed in Python from each document's
text. Read through Spark, every text is decoded by the JVM, converted to Arrow and sent to a
Python worker; read by the task itself with pyarrow (``read_units``, as the filter job reads),
it is decoded once, where it is used, and only the small feature rows enter Spark. Spark still
schedules, retries and places the units. The rows are the same, whichever way they are read.
The kept documents are written over the same units (``dedup_write``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession

from lakehouse.parquet import store_properties
from pipelines.dedup_stages import FEATURES_SCHEMA, DedupConfig, document_features
from pipelines.read_units import SourceUnit, plan_units
from pipelines.snapshot_texts import TextSource
from pipelines.spark_session import snapshot_files

_TEXTS = pa.schema([("doc_id", pa.string()), ("text", pa.string())])
# The features, and the index of the unit each document was read from: the distributed plan
# sends each unit's decisions to the task that writes it (``dedup_write``).
UNIT_FEATURES_SCHEMA = f"{FEATURES_SCHEMA}, _unit int"


def source_units(sources: Sequence[TextSource]) -> list[SourceUnit]:
    """The read units of ``sources``, in the sources' order, then the units' order: they depend
    on the snapshots alone."""
    units = []
    for source in sources:
        io_properties = store_properties(source.table.io.properties)
        paths = snapshot_files(source.table, source.snapshot_id, source.label)
        units.extend(
            SourceUnit(source.prefix, unit, io_properties) for unit in plan_units(paths, io_properties, "n_bytes")
        )
    return units


def unit_features(spark: SparkSession, units: Sequence[SourceUnit], cfg: DedupConfig) -> DataFrame:
    """``UNIT_FEATURES_SCHEMA`` rows of every document of ``units`` (``source_units``), keyed
    ``prefix + doc_id``: one Spark task per unit, in the units' order."""
    if not units:
        return spark.createDataFrame([], UNIT_FEATURES_SCHEMA)
    units = list(units)

    def features(ids: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pipelines.read_units import read_unit

        for batch in ids:
            for i in batch.column(0).to_pylist():
                unit = units[i]
                for docs in read_unit(unit.unit, _TEXTS, unit.io_properties):
                    keys = pc.binary_join_element_wise(unit.prefix, docs.column("doc_id"), "")
                    rows = document_features(keys, docs.column("text"), cfg)
                    yield rows.append_column("_unit", pa.repeat(pa.scalar(i, pa.int32()), rows.num_rows))

    return spark.range(0, len(units), 1, len(units)).mapInArrow(features, UNIT_FEATURES_SCHEMA)
