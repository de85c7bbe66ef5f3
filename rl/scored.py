"""What a task source says of one completion: its reward and how its tests went (``rl.rollouts`` records it)."""

from __future__ import annotations

from dataclasses import dataclass

from lakehouse.schemas import SAMPLE_OUTPUT_BYTES


@dataclass(frozen=True)
class Scored:
    reward: float  # in [0, 1]: the share of the task's tests that passed
    passed: int  # tests that passed
    total: int  # the task's tests
    outcome: str  # passed (all) | partial | failed (none) | timeout | syntax-error | too-long | error
    output: str  # the end of what the tests printed, at most SAMPLE_OUTPUT_BYTES bytes of UTF-8
    duration_s: float  # the sandboxed run's wall time (0 when nothing ran)


def outcome_of(passed: int, total: int) -> str:
    return "passed" if total and passed == total else "partial" if passed else "failed"


def bounded(text: str, limit: int = SAMPLE_OUTPUT_BYTES) -> str:
    """The last ``limit`` bytes of ``text`` (whole characters): the end of a run's output says why it ended."""
    data = text.encode("utf-8")
    return text if len(data) <= limit else data[-limit:].decode("utf-8", errors="ignore")
