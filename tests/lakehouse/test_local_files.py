"""Writing a local file whole or not at all, and durably: fsynced before it is published."""

from __future__ import annotations

import os

from lakehouse.local_files import write_atomically
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
