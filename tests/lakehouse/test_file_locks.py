"""lakehouse/file_locks.py: an exclusive flock, waited for or refused. Each ``open`` of the file is
its own lock holder, so two threads here stand for two processes."""

from __future__ import annotations

import threading
import time

import pytest

from lakehouse.file_locks import LockHeld, locked


def test_a_held_lock_is_refused_without_waiting_and_waited_for_otherwise(tmp_path):
    path = tmp_path / "locks" / "work.lock"
    waited, order = threading.Event(), []

    def second() -> None:
        with locked(path, wait=True, on_wait=waited.set):
            order.append("second")

    with locked(path, wait=False):
        with pytest.raises(LockHeld), locked(path, wait=False):
            pass
        thread = threading.Thread(target=second)
        thread.start()
        assert waited.wait(10), "the second holder did not find the lock held"
        time.sleep(0.2)
        order.append("first")
    thread.join(10)
    assert order == ["first", "second"]
    with locked(path, wait=False):  # released by both: free again
        pass
