"""The loader's position: small JSON that seeks in O(1).

A state holds, for each logical shard a rank serves and each component, a cursor
``[epoch, position, token]``: the next token that sub-stream delivers is token ``token`` (the
separator counts as a document's last token) of the document at ``position`` of the shard's
slice in ``epoch``. With the index of the next global batch and the mixing schedule's
deficits, that is the whole position of the stream: nothing is replayed to get back to it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lakehouse.errors import LoaderStateError

FORMAT = "factory-loader-state/1"
# What must match between a state and the loader that loads it: the stream's definition.
STREAM_KEYS = (
    "manifest",
    "tokenizer",
    "seq_len",
    "global_batch_size",
    "num_shards",
    "packing",
    "shuffle_window",
    "split",
)


@dataclass(frozen=True)
class Cursor:
    epoch: int = 0
    position: int = 0
    token: int = 0

    def to_list(self) -> list[int]:
        return [self.epoch, self.position, self.token]

    @classmethod
    def from_list(cls, value: Sequence[int]) -> Cursor:
        if len(value) != 3 or not all(isinstance(v, int) and v >= 0 for v in value):
            raise LoaderStateError(f"a cursor is [epoch, position, token] of non-negative integers, got {value!r}")
        return cls(*value)


def make_state(
    stream: Mapping[str, Any],
    batch: int,
    deficits: Sequence[int],
    cursors: Mapping[int, Mapping[str, Cursor]],
) -> dict[str, Any]:
    return {
        "format": FORMAT,
        **stream,
        "batch": batch,
        "schedule": list(deficits),
        "shards": {str(s): {name: c.to_list() for name, c in by_name.items()} for s, by_name in cursors.items()},
    }


def merge_states(states: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One state holding every shard of several ranks' states (taken at the same batch)."""
    if not states:
        raise LoaderStateError("no loader state to merge")
    first = states[0]
    merged = {**first, "shards": {}}
    for state in states:
        for key in (*STREAM_KEYS, "batch", "schedule"):
            if state.get(key) != first.get(key):
                raise LoaderStateError(
                    f"loader states disagree on {key!r} ({first.get(key)!r} vs {state.get(key)!r}); "
                    "they must be the states of all ranks at the same step"
                )
        merged["shards"].update(state.get("shards", {}))
    return merged


def check_state(
    state: Mapping[str, Any] | Sequence[Mapping[str, Any]], stream: Mapping[str, Any], shards: Sequence[int], names
) -> tuple[int, list[int], dict[int, dict[str, Cursor]]]:
    """Validate a state (or all ranks' states) against this loader: ``(batch, deficits, cursors)``."""
    if not isinstance(state, Mapping):
        state = merge_states(list(state))
    if state.get("format") != FORMAT:
        raise LoaderStateError(f"not a loader state (format {state.get('format')!r}, expected {FORMAT!r})")
    for key in STREAM_KEYS:
        if state.get(key) != stream.get(key):
            raise LoaderStateError(
                f"the state belongs to another stream: its {key} is {state.get(key)!r}, this loader's is "
                f"{stream.get(key)!r}; resume with the same manifest, tokenizer and loader settings"
            )
    batch, deficits = state.get("batch"), state.get("schedule")
    if not isinstance(batch, int) or batch < 0 or not isinstance(deficits, list):
        raise LoaderStateError("the state's batch index or schedule is missing or malformed")
    saved = state.get("shards", {})
    missing = [s for s in shards if str(s) not in saved]
    if missing:
        raise LoaderStateError(
            f"the state has no cursors for logical shard(s) {missing}; when resuming with another world size, "
            "pass the states of all ranks (a list) to load_state_dict"
        )
    cursors = {}
    for s in shards:
        by_name = saved[str(s)]
        absent = [n for n in names if n not in by_name]
        if absent:
            raise LoaderStateError(f"the state's shard {s} has no cursor for component(s) {absent}")
        cursors[s] = {n: Cursor.from_list(by_name[n]) for n in names}
    return batch, [int(d) for d in deficits], cursors
