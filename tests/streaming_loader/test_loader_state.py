"""A loader state is checked for meaning when loaded: keys, types, cursors in range, reachable deficits.

A state is small JSON a person can edit; every edit below is refused with a LoaderStateError
naming what is wrong, before anything is read.
"""

from __future__ import annotations

import copy
import re

import pytest

from lakehouse.errors import LoaderStateError
from streaming_loader import StreamingLoader
from streaming_loader.mix import QUANTUM
from streaming_loader.state import STREAM_KEYS
from streaming_loader.tokenizer_train import EOD_TOKEN, PAD_TOKEN
from tests.streaming_loader.conftest import SMALL
from tests.streaming_loader.test_loader import loader, take

STATE_KEYS = ("format", *STREAM_KEYS, "batch", "schedule", "shards")


@pytest.fixture(scope="module")
def saved(mixture) -> dict:
    with loader(mixture) as source:
        take(source, 5)
        state = source.state_dict()
    assert set(state) == set(STATE_KEYS)  # the cases below cover every key a state has
    return state


def _refused(mixture, state, message: str, manifest=None, **options) -> None:
    with loader(mixture, manifest, **options) as target, pytest.raises(LoaderStateError, match=message):
        target.load_state_dict(state)


# --- property: a state of another stream, or one missing a key, is refused naming it ----------


@pytest.mark.parametrize("key", STATE_KEYS)
def test_a_state_missing_any_key_is_refused_naming_it(mixture, saved, key):
    state = {k: v for k, v in saved.items() if k != key}
    _refused(mixture, state, rf"the loader state lacks key\(s\) {key}\b")
    _refused(mixture, [state], rf"lacks key\(s\) {key}\b")  # the states of all ranks, after a world-size change


CHANGED = {
    "manifest": "sha256:" + "0" * 64,
    "tokenizer": "sha256:" + "1" * 64,
    "seq_len": 32,
    "global_batch_size": 16,
    "num_shards": 4,
    "packing": "pad",
    "shuffle_window": 4,
    "split": "heldout",
    "max_document_bytes": 4096,
}


@pytest.mark.parametrize("key", STREAM_KEYS)
def test_a_state_of_another_stream_is_refused_naming_what_differs(mixture, saved, key):
    state = {**saved, key: CHANGED[key]}
    _refused(mixture, state, rf"belongs to another stream: its {key} is {CHANGED[key]!r}")


def test_a_state_resumes_only_with_the_separator_it_was_saved_with(mixture, saved):
    # The separator is the tokenizer's own end-of-document token unless eod_token= names another:
    # another separator is another stream, though the tokenizer file is the same.
    message = rf"its tokenizer is 'sha256:\w+', this loader's is 'sha256:\w+ eod={re.escape(PAD_TOKEN)}'"
    _refused(mixture, saved, message, eod_token=PAD_TOKEN)
    with loader(mixture, eod_token=EOD_TOKEN) as same:  # named, but the file's own: the same stream
        same.load_state_dict(saved)


def test_a_state_from_another_manifest_is_refused(mixture, saved):
    _refused(mixture, saved, r"its manifest is 'sha256:.*this loader's is 'sha256:", manifest=mixture.filtered)


def test_a_missing_shard_or_component_cursor_is_refused_naming_it(mixture, saved):
    state = copy.deepcopy(saved)
    del state["shards"]["3"]
    _refused(mixture, state, r"no cursors for logical shard\(s\) \[3\]")
    state = copy.deepcopy(saved)
    del state["shards"]["0"]["code"]
    _refused(mixture, state, r"shard 0 has no cursor for component\(s\) \['code'\]")


# --- meaning -------------------------------------------------------------------------------


def _edit(path: str, value):
    def edit(state: dict) -> None:
        *parents, last = path.split("/")
        node = state
        for key in parents:
            node = node[key]
        node[int(last) if isinstance(node, list) else last] = value

    return edit


EDITS = {
    "batch true": (_edit("batch", True), r"batch must be an integer in \[0, 2\*\*63\), got True"),
    "batch negative": (_edit("batch", -1), r"batch must be an integer in \[0, 2\*\*63\), got -1"),
    "batch a float": (_edit("batch", 5.0), r"batch must be an integer"),
    "batch beyond int64": (_edit("batch", 2**63), r"batch must be an integer in \[0, 2\*\*63\)"),
    "deficits of 1e12": (_edit("schedule", [10**12, -(10**12)]), r"schedule \[1000000000000, -1000000000000\] is not"),
    "deficits not summing to zero": (_edit("schedule", [QUANTUM // 2, 0]), r"schedule .* is not one the mixing"),
    "deficits of floats": (_edit("schedule", [0.5, -0.5]), r"schedule must be 2 integers"),
    "deficit a bool": (_edit("schedule", [True, -1]), r"schedule must be 2 integers"),
    "deficits too few": (_edit("schedule", [0]), r"schedule must be 2 integers"),
    "schedule not a list": (_edit("schedule", "0,0"), r"schedule must be 2 integers"),
    "shards not an object": (_edit("shards", [1, 2]), r"shards must be an object"),
    "cursors not an object": (_edit("shards/0", [0, 0, 0]), r"shard 0's cursors must be an object"),
    "cursor not a list": (_edit("shards/0/text", "0,0,0"), r"shard 0, component 'text': a cursor is \[epoch"),
    "cursor too short": (_edit("shards/0/text", [0, 0]), r"shard 0, component 'text': a cursor is \[epoch"),
    "epoch negative": (_edit("shards/0/text/0", -1), r"shard 0, component 'text': a cursor is \[epoch"),
    "epoch true": (_edit("shards/0/text/0", True), r"a cursor is \[epoch, position, token\] of integers"),
    "epoch beyond int64": (_edit("shards/0/text/0", 2**63), r"a cursor is \[epoch, position, token\]"),
    "position a float": (_edit("shards/1/code/1", 1.0), r"shard 1, component 'code': a cursor is \[epoch"),
    "position past the slice": (_edit("shards/2/text/1", 40), r"shard 2, component 'text': position 40 is outside"),
    "position far past the slice": (_edit("shards/2/text/1", 10**12), r"position 1000000000000 is outside"),
}


@pytest.mark.parametrize("case", sorted(EDITS))
def test_a_state_edited_out_of_meaning_is_refused(mixture, saved, case):
    edit, message = EDITS[case]
    state = copy.deepcopy(saved)
    edit(state)
    _refused(mixture, state, message)


def test_a_token_past_its_document_is_refused_when_the_stream_seeks(mixture, saved):
    state = copy.deepcopy(saved)
    for shard in state["shards"].values():
        shard["text"][2] = 10**9
    with loader(mixture) as target:
        target.load_state_dict(state)
        with pytest.raises(LoaderStateError, match=r"token 1000000000 of document \d+ of epoch \d+, which has \d+"):
            next(target)


def test_the_saved_state_itself_resumes(mixture, saved):
    with loader(mixture) as target:
        target.load_state_dict(copy.deepcopy(saved))
        next(target)
    assert SMALL["global_batch_size"] == 8 and isinstance(target, StreamingLoader)
