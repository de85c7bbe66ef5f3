"""How big a table's data files should be, and which small files to combine (docs/architecture.md,
"File sizes").

A table's files aim at ``write.target-file-size-bytes``, Iceberg's own table property, when the
table sets it, else ``TARGET_FILE_BYTES``. We default to 128 MiB rather than Iceberg's 512 MiB: a
file is the unit the readers spread over cores (``pipelines.read_units`` cuts at most 128 MiB per
task), and 128 MiB is still far past the size where a file's fixed costs (an open, a footer, a
manifest entry) matter.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeVar

from lakehouse.errors import InputError

TARGET_FILE_BYTES = 128 << 20
TARGET_PROPERTY = "write.target-file-size-bytes"
# A file smaller than this fraction of the target is "small": compaction combines such files
# and leaves the rest (Iceberg's rewrite_data_files default, min-file-size-bytes = 75 %).
SMALL_FRACTION = 0.75

T = TypeVar("T")


def target_file_bytes(properties: Mapping[str, str]) -> int:
    """The data file size a table with these properties aims at."""
    return bytes_property(properties, TARGET_PROPERTY, TARGET_FILE_BYTES)


def bytes_property(properties: Mapping[str, str], key: str, default: int) -> int:
    """The table property ``key``, a positive number of bytes, else ``default``."""
    value = properties.get(key)
    if value is None:
        return default
    try:
        size = int(value)
    except ValueError:
        size = 0
    if size <= 0:
        raise InputError(f"table property {key}={value!r} must be a positive number of bytes")
    return size


def consecutive_groups(items: Sequence[T], sizes: Sequence[int], target: int) -> list[list[T]]:
    """``items`` in order, cut into runs whose sizes add up to at most ``target`` (an item bigger
    than ``target`` is a run of its own). The runs depend on the sizes alone, so the same files
    give the same groups whatever wrote them."""
    groups: list[list[T]] = []
    total = 0
    for item, size in zip(items, sizes, strict=True):
        if groups and total + size <= target:
            groups[-1].append(item)
            total += size
        else:
            groups.append([item])
            total = size
    return groups


def first_fit_groups(items: Sequence[T], sizes: Sequence[int], target: int) -> list[list[T]]:
    """``items`` packed first-fit, in order, into bins of at most ``target``: each item goes to the
    first bin it fits in. Any two bins then add up to more than ``target`` (the later bin's first
    item did not fit in the earlier one), so packing the result again combines nothing: compacting
    a compacted table is a no-op."""
    bins: list[list[T]] = []
    totals: list[int] = []
    for item, size in zip(items, sizes, strict=True):
        for i, total in enumerate(totals):
            if total + size <= target:
                bins[i].append(item)
                totals[i] += size
                break
        else:
            bins.append([item])
            totals.append(size)
    return bins


def is_small(size: int, target: int) -> bool:
    return size < target * SMALL_FRACTION
