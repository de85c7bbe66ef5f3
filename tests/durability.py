"""Recording the fsyncs and renames a writer makes, in order (os.fsync is not an engine: patching it is fine)."""

from __future__ import annotations

import os

import pytest


class SyncLog(list):
    """Events in order: ``("fsync", path)`` and ``("rename", source, target)``, real paths."""

    def synced(self, path) -> bool:
        return ("fsync", os.path.realpath(path)) in self

    def first(self, *event) -> int:
        return self.index(event)

    def last(self, *event) -> int:
        return len(self) - 1 - self[::-1].index(event)

    def renamed_to(self, target) -> int:
        """Index of the rename that published ``target``."""
        target = os.path.realpath(target)
        return next(i for i, e in enumerate(self) if e[0] == "rename" and e[2] == target)


def record_syncs(monkeypatch: pytest.MonkeyPatch) -> SyncLog:
    events = SyncLog()
    fsync, replace, rename = os.fsync, os.replace, os.rename

    def recording_fsync(fd) -> None:
        number = fd if isinstance(fd, int) else fd.fileno()
        fsync(number)
        events.append(("fsync", os.readlink(f"/proc/self/fd/{number}")))

    def recording(real):
        def move(source, target, *args, **kwargs):
            real(source, target, *args, **kwargs)
            events.append(("rename", os.path.realpath(source), os.path.realpath(target)))

        return move

    monkeypatch.setattr(os, "fsync", recording_fsync)
    monkeypatch.setattr(os, "replace", recording(replace))
    monkeypatch.setattr(os, "rename", recording(rename))
    return events
