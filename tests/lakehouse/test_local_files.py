"""Writing a local file whole or not at all, and durably: fsynced before it is published."""

from __future__ import annotations

import os

import pytest

from lakehouse.local_files import write_atomically
from tests.conftest import run_factory
from tests.durability import record_syncs


def test_write_atomically_syncs_the_file_before_the_rename_and_the_folder_after(tmp_path, monkeypatch):
    events = record_syncs(monkeypatch)
    target = tmp_path / "nested" / "state.json"
    target.parent.mkdir()
    write_atomically(target, '{"step": 1}')
    assert target.read_text() == '{"step": 1}'
    published = events.renamed_to(target)
    temporary = events[published][1]
    assert events.first("fsync", temporary) < published  # the bytes are on disk before the name points at them
    assert events.last("fsync", os.path.realpath(target.parent)) > published  # and the rename itself is durable
    assert events.synced(tmp_path)  # a folder made for the file survives too


def test_an_output_path_that_cannot_be_a_file_is_refused_before_the_work(tmp_path):
    (tmp_path / "folder").mkdir()
    for args, message in (
        (("tokenizer", "train", "--input", "raw.none", "--vocab-size", "300"), "is a folder: give a file's path"),
        (("mix", "pin", str(tmp_path / "no-spec.toml")), "is a folder: give a file's path"),
    ):
        done = run_factory(*args, "--output", str(tmp_path / "folder"))
        assert done.returncode == 2 and message in done.stderr, done.stderr
    done = run_factory("mix", "pin", str(tmp_path / "no-spec.toml"), "--output", str(tmp_path / "no" / "m.json"))
    assert done.returncode == 2 and f"the folder {tmp_path / 'no'} does not exist" in done.stderr, done.stderr
    # The write itself: a failed one leaves nothing beside the target.
    with pytest.raises(IsADirectoryError):
        write_atomically(tmp_path / "folder", "text")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["folder"]
