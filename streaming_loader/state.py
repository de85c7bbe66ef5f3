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
    "max_document_bytes",  # a longer document is tokenized in pieces: other tokens at the cuts
)


@dataclass(frozen=True)
class Cursor:
    epoch: int = 0
    position: int = 0
    token: int = 0

    def to_list(self) -> list[int]:
        return [self.epoch, self.position, self.token]

    @classmethod
    def from_list(cls, value: Sequence[int], where: str = "") -> Cursor:
        if not isinstance(value, list | tuple) or len(value) != 3 or not all(_is_index(v) for v in value):
            raise LoaderStateError(
                f"{where}{': ' if where else ''}a cursor is [epoch, position, token] of integers in [0, 2**63), "
                f"got {value!r}"
            )
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
    for state in states:
        _require_keys(state)
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
        if not isinstance(state, Sequence) or isinstance(state, str | bytes):
            raise LoaderStateError(f"a loader state is an object, or a list of all ranks' states; got {state!r:.80}")
        state = merge_states(list(state))
    _require_keys(state)
    if state.get("format") != FORMAT:
        raise LoaderStateError(f"not a loader state (format {state.get('format')!r}, expected {FORMAT!r})")
    for key in STREAM_KEYS:
        if state.get(key) != stream.get(key):
            raise LoaderStateError(
                f"the state belongs to another stream: its {key} is {state.get(key)!r}, this loader's is "
                f"{stream.get(key)!r}; resume with the same manifest, tokenizer and loader settings"
            )
    batch, deficits, saved = state["batch"], state["schedule"], state["shards"]
    if not _is_index(batch):
        raise LoaderStateError(f"the state's batch must be an integer in [0, 2**63), got {batch!r}")
    if not isinstance(deficits, list) or len(deficits) != len(names) or not all(_is_int(d) for d in deficits):
        raise LoaderStateError(
            f"the state's schedule must be {len(names)} integers (a deficit per component), got {deficits!r}"
        )
    if not isinstance(saved, Mapping):
        raise LoaderStateError(f"the state's shards must be an object of shard -> cursors, got {saved!r:.80}")
    missing = [s for s in shards if str(s) not in saved]
    if missing:
        raise LoaderStateError(
            f"the state has no cursors for logical shard(s) {missing}; when resuming with another world size, "
            "pass the states of all ranks (a list) to load_state_dict"
        )
    cursors = {}
    for s in shards:
        by_name = saved[str(s)]
        if not isinstance(by_name, Mapping):
            raise LoaderStateError(f"the state's shard {s}'s cursors must be an object of component -> cursor")
        absent = [n for n in names if n not in by_name]
        if absent:
            raise LoaderStateError(f"the state's shard {s} has no cursor for component(s) {absent}")
        cursors[s] = {n: Cursor.from_list(by_name[n], f"shard {s}, component {n!r}") for n in names}
    return batch, list(deficits), cursors


def _require_keys(state: object) -> None:
    if not isinstance(state, Mapping):
        raise LoaderStateError(f"a loader state is an object, got {state!r:.80}")
    missing = [key for key in ("format", *STREAM_KEYS, "batch", "schedule", "shards") if key not in state]
    if missing:
        raise LoaderStateError(
            f"the loader state lacks key(s) {', '.join(missing)}; give a whole state saved by state_dict()"
        )


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)  # JSON true is not a count


def _is_index(value: object) -> bool:
    """A count the stream's seeds can take (they pack it as a signed 64-bit integer)."""
    return _is_int(value) and 0 <= value < 2**63
