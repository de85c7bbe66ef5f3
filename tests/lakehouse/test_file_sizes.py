"""Target file sizes and the grouping of small files (no engine)."""

from __future__ import annotations

import itertools
import random

import pytest

from lakehouse.errors import InputError
from lakehouse.file_sizes import TARGET_FILE_BYTES, consecutive_groups, first_fit_groups, target_file_bytes


def test_the_table_property_is_honoured_and_the_default_is_128_mib():
    assert target_file_bytes({}) == TARGET_FILE_BYTES == 128 << 20
    assert target_file_bytes({"write.target-file-size-bytes": "1000"}) == 1000
    for bad in ("0", "-5", "lots"):
        with pytest.raises(InputError, match=r"write\.target-file-size-bytes"):
            target_file_bytes({"write.target-file-size-bytes": bad})


def test_consecutive_groups_keep_order_and_stay_under_the_target():
    sizes = [30, 30, 30, 50, 200, 10, 10]
    groups = consecutive_groups(list(range(len(sizes))), sizes, 100)
    assert groups == [[0, 1, 2], [3], [4], [5, 6]]
    assert list(itertools.chain(*groups)) == list(range(len(sizes)))


def test_first_fit_leaves_nothing_to_combine_a_second_time():
    rng = random.Random(7)
    for _ in range(200):
        sizes = [rng.randint(1, 120) for _ in range(rng.randint(1, 40))]
        bins = first_fit_groups(list(range(len(sizes))), sizes, 100)
        assert sorted(itertools.chain(*bins)) == list(range(len(sizes)))
        totals = [sum(sizes[i] for i in b) for b in bins]
        assert all(t <= 100 or len(b) == 1 for t, b in zip(totals, bins, strict=True))
        # Packing the packed files again combines none of them.
        assert all(len(b) == 1 for b in first_fit_groups(list(range(len(totals))), totals, 100))


def test_missing_files_lists_a_folder_of_many_and_names_exactly_the_missing(tmp_path):
    from lakehouse.parquet import LIST_FOLDER_AT, missing_files

    uris = []
    for i in range(2 * LIST_FOLDER_AT + 6):  # enough in one folder, as URIs and as paths, to be listed
        path = tmp_path / "data" / f"part-{i:05d}{' x' if i == 5 else ''}.parquet"
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(b"x")
        uris.append(f"file://{str(path).replace(' ', '%20')}" if i % 2 else str(path))
    (tmp_path / "data" / "part-00003.parquet").unlink()
    (tmp_path / "data" / "part-00010.parquet").unlink()
    (tmp_path / "data" / "part-00011.parquet").unlink()
    (tmp_path / "data" / "part-00011.parquet").mkdir()  # a folder where a file should be
    few = [str(tmp_path / "elsewhere.parquet")]
    assert missing_files(uris + few) == [uris[3], uris[10], uris[11], few[0]]  # "part-00005 x": present
    (tmp_path / "data" / "part-00005 x.parquet").unlink()
    assert missing_files(uris) == [uris[3], uris[5], uris[10], uris[11]]
    assert missing_files(uris[:2]) == []
