"""The loader on the local backend: batches, determinism, resume, world-size changes, bad input."""

from __future__ import annotations

import itertools
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from lakehouse.errors import DataFileError, LoaderConfigError, LoaderStateError
from mixtures.heldout import heldout_mask
from mixtures.manifest import Manifest
from streaming_loader import StreamingLoader, merge_states
from streaming_loader.loader import IGNORE_INDEX
from streaming_loader.tokenize import PARALLELISM_VARIABLE, load_tokenizer_spec
from tests.streaming_loader.conftest import SMALL

LOCAL = {"backend": "local"}


def loader(mixture, manifest=None, **options) -> StreamingLoader:
    return StreamingLoader.from_manifest(
        manifest or mixture.manifest, mixture.tokenizer, **{**SMALL, **LOCAL, **options}
    )


def take(source, n: int) -> list[dict[str, torch.Tensor]]:
    return [next(source) for _ in range(n)]


def component_text(mixture, batches: list[dict], component: int) -> str:
    """The decoded text of one component's windows (of a single logical shard), overlaps removed."""
    spec = load_tokenizer_spec(mixture.tokenizer)
    rows = [torch.cat([b["input_ids"], b["labels"][:, -1:]], 1)[b["components"] == component] for b in batches]
    windows = [w for r in rows for w in r.tolist()]
    ids = list(windows[0])
    for before, w in itertools.pairwise(windows):
        ids.extend(w[1:] if before[-1] != spec.eod_id else w)  # a window after a mid-document end repeats a token
    return spec.load().decode(ids)


def same(a: list[dict], b: list[dict]) -> bool:
    return len(a) == len(b) and all(torch.equal(x[k], y[k]) for x, y in zip(a, b, strict=True) for k in x)


def test_a_batch_is_packed_shifted_and_mixed(mixture):
    eod = load_tokenizer_spec(mixture.tokenizer).eod_id
    with loader(mixture) as source:
        batches = take(source, 30)
    first = batches[0]
    assert first["input_ids"].shape == first["labels"].shape == first["position_ids"].shape == (8, 48)
    assert first["input_ids"].dtype == torch.long and first["components"].shape == (8,)
    for b in batches:
        assert torch.equal(b["input_ids"][:, 1:], b["labels"][:, :-1])  # labels are the next tokens
        counts = torch.bincount(b["components"], minlength=2).tolist()
        assert abs(counts[0] - 8 * 0.6) < 1 and abs(counts[1] - 8 * 0.4) < 1
        ids, pos = b["input_ids"], b["position_ids"]
        after_eod = torch.zeros_like(ids, dtype=torch.bool)
        after_eod[:, 1:] = ids[:, :-1] == eod
        assert torch.all(pos[after_eod] == 0) and torch.all(pos[:, 0] == 0)
        assert torch.all(pos[:, 1:][~after_eod[:, 1:]] == pos[:, :-1][~after_eod[:, 1:]] + 1)
    assert (torch.cat([b["input_ids"] for b in batches]) == eod).any()  # documents are separated


def test_the_stream_is_a_pure_function_of_its_inputs(mixture):
    with loader(mixture) as a, loader(mixture, local_prefetch=0, read_bytes=50_000) as b:
        assert same(take(a, 25), take(b, 25))  # prefetching and unit sizes change nothing
    with loader(mixture, shuffle_window=16) as c, loader(mixture) as d:
        assert not same(take(c, 5), take(d, 5))  # the shuffle window is part of the definition


def test_resume_equals_the_uninterrupted_stream_at_every_step(mixture):
    with loader(mixture) as whole:
        reference = take(whole, 40)
        epochs = [max(c[0] for shard in whole.state_dict()["shards"].values() for c in shard.values())]
    assert epochs[0] >= 1  # the stream crossed an epoch boundary on the way
    states = []
    with loader(mixture) as source:
        for _ in range(40):
            states.append(json.loads(json.dumps(source.state_dict())))  # small JSON
            next(source)

    def epochs_in(state) -> list[int]:
        return sorted(c[0] for shard in state["shards"].values() for c in shard.values())

    crossings = [k for k in range(39) if epochs_in(states[k]) != epochs_in(states[k + 1])]
    assert crossings  # resume right before and right after sub-streams enter a new epoch
    for k in sorted({*range(0, 40, 3), *crossings, *(k + 1 for k in crossings)}):
        with loader(mixture) as resumed:
            resumed.load_state_dict(states[k])
            assert same(take(resumed, 40 - k), reference[k:]), k
    with loader(mixture) as first, loader(mixture) as second:  # a resume of a resume
        first.load_state_dict(states[5])
        take(first, 7)
        second.load_state_dict(first.state_dict())
        assert same(take(second, 10), reference[12:22])
    assert len(json.dumps(states[-1])) < 4000


def test_seeking_reads_only_what_the_cursors_need(mixture):
    with loader(mixture) as source:
        take(source, 30)
        late = source.state_dict()
    late["batch"] = 10**6  # far along the stream: the seek costs the same
    counts = []
    for state in (None, late):
        with loader(mixture, local_prefetch=0) as fresh:
            if state:
                fresh.load_state_dict(state)
            calls: list[tuple] = []
            original = fresh._backend.open
            fresh._backend.open = lambda *a, calls=calls, original=original: (calls.append(a), original(*a))[1]
            next(fresh)
            counts.append(len(calls))
    assert counts[0] == counts[1] <= 16  # one reader per sub-stream, never a replay


def test_local_readers_tokenize_on_their_own_threads_while_open(mixture, monkeypatch):
    monkeypatch.delenv(PARALLELISM_VARIABLE, raising=False)
    with loader(mixture) as source:
        next(source)
        assert os.environ.get(PARALLELISM_VARIABLE) == "false"
    assert PARALLELISM_VARIABLE not in os.environ  # as it was before the loader


@pytest.mark.parametrize(("before", "after"), [(1, 2), (2, 1), (4, 2)])
def test_a_world_size_change_continues_the_same_global_batches(mixture, before, after):
    with loader(mixture, num_shards=4) as single:
        reference = [b["input_ids"] for b in take(single, 12)]
    ranks = [loader(mixture, num_shards=4, dp_rank=r, dp_world=before) for r in range(before)]
    for step in range(5):  # the ranks' slices are disjoint and together the global batch
        assert torch.equal(torch.cat([next(r)["input_ids"] for r in ranks]), reference[step])
    states = [r.state_dict() for r in ranks]
    for r in ranks:
        r.close()
    resumed = [loader(mixture, num_shards=4, dp_rank=r, dp_world=after) for r in range(after)]
    for r in resumed:
        r.load_state_dict(states)  # every rank reads all the old ranks' states
    for step in range(5, 12):
        assert torch.equal(torch.cat([next(r)["input_ids"] for r in resumed]), reference[step])
    for r in resumed:
        r.close()
    if before > after:
        with (
            loader(mixture, num_shards=4, dp_world=after) as partial,
            pytest.raises(LoaderStateError, match="no cursors for logical shard"),
        ):
            partial.load_state_dict(states[1])


def test_pad_packing_pads_instead_of_splitting(mixture):
    with loader(mixture, packing="pad") as source:
        batches = take(source, 10)
    labels = torch.cat([b["labels"] for b in batches])
    assert (labels == IGNORE_INDEX).any()
    with loader(mixture) as concat:
        assert not any((b["labels"] == IGNORE_INDEX).any() for b in take(concat, 10))


def test_the_trainers_batches_are_all_tokens_so_its_lineage_counts_them_exactly(mixture):
    """A checkpoint's loader_position.tokens is computed (global batches × global batch size ×
    seq_len), not counted: it is exact because the trainer's loader packs with concat, whose windows
    are always full (documents run on across windows and epochs), so no row holds padding and no
    label is masked, past an epoch's end too. Were the trainer to pack with pad, this would fail."""
    from trainer.config import load_config
    from trainer.data import build_loader
    from trainer.parallel import World
    from trainer.train import lineage_record

    data = {"manifest": str(mixture.manifest), "tokenizer": str(mixture.tokenizer), "seq_len": 48, "backend": "local"}
    cfg = load_config(None, ["data.global_batch_size=8"], raw={"data": data, "model": {"preset": "tiny"}})
    source, _ = build_loader(cfg, World(0, 1, 0, torch.device("cpu"), None))
    with source:
        trained = sum(int((b["labels"] != IGNORE_INDEX).sum()) for b in take(source, 40))
        state = source.state_dict()
    position = lineage_record({}, Path("run"), 40, state, cfg)["loader_position"]
    assert position["tokens"] == trained == 40 * 8 * 48 and position["next_global_batch"] == 40
    assert state["packing"] == "concat"
    assert any(cursor[0] > 0 for by_name in state["shards"].values() for cursor in by_name.values())  # a new epoch


def test_held_out_documents_never_reach_training(mixture):
    manifest = Manifest.load(mixture.manifest)
    code = mixture.catalog.load_table(("raw", "code")).scan().to_arrow()
    held = heldout_mask(code["doc_id"].to_pylist(), manifest.component("code").heldout_fraction)
    assert 0 < held.sum() < len(held)
    texts = code["text"].to_pylist()

    def decoded(split: str) -> str:
        with loader(mixture, split=split, num_shards=1, global_batch_size=2) as source:
            return component_text(mixture, take(source, 60), 1)

    train, heldout = decoded("train"), decoded("heldout")
    long_held = [t for t, h in zip(texts, held, strict=True) if h and len(t) > 80]
    long_kept = [t for t, h in zip(texts, held, strict=True) if not h and len(t) > 80]
    assert not any(t in train for t in long_held) and any(t in train for t in long_kept)
    assert any(t in heldout for t in long_held) and not any(t in heldout for t in long_kept)


def test_a_row_filter_keeps_only_matching_documents(mixture):
    with loader(mixture, mixture.filtered, num_shards=1, global_batch_size=2) as source:
        text = component_text(mixture, take(source, 40), 1)
    code = mixture.catalog.load_table(("raw", "code")).scan().to_arrow().to_pylist()
    python = [r["text"] for r in code if r["lang"] == "python" and len(r["text"]) > 80]
    rust = [r["text"] for r in code if r["lang"] == "rust" and len(r["text"]) > 80]
    assert rust and not any(t in text for t in rust) and any(t in text for t in python)


def test_bad_settings_fail_before_anything_starts(mixture):
    with pytest.raises(LoaderConfigError, match="does not divide global_batch_size"):
        loader(mixture, dp_world=3)
    with pytest.raises(LoaderConfigError, match="does not divide num_shards=2"):
        loader(mixture, num_shards=2, dp_world=4)
    with pytest.raises(LoaderConfigError, match="dp_rank must be in"):
        loader(mixture, dp_rank=2, dp_world=2)
    with pytest.raises(LoaderConfigError, match="backend must be one of"):
        loader(mixture, backend="spark")
    # Each of these was accepted, then hung in next() with memory growing (seq_len), failed there
    # with a bare TypeError (log_interval_s), or silently meant something else.
    for settings, says in [
        ({"seq_len": 10**12}, "seq_len must be at most"),
        ({"log_interval_s": "x"}, "log_interval_s must be a number"),
        ({"log_interval_s": -1}, "log_interval_s must be a number"),
        ({"log_interval_s": float("nan")}, "log_interval_s must be a number"),
        ({"dp_rank": True, "dp_world": 2}, "dp_rank must be in"),
        ({"eod_token": ""}, "eod_token must be a token"),
    ]:
        with pytest.raises(LoaderConfigError, match=says):
            loader(mixture, **settings)
    with (
        loader(mixture) as source,
        loader(mixture, seq_len=32) as other,
        pytest.raises(LoaderStateError, match="its seq_len is 48"),
    ):
        other.load_state_dict(source.state_dict())


def test_missing_and_corrupt_files_are_named(mixture, tmp_path):
    manifest = Manifest.load(mixture.manifest)
    victim = manifest.component("code").files[0].path.removeprefix("file://")
    backup = tmp_path / "backup.parquet"
    shutil.copy(victim, backup)
    try:
        shutil.move(victim, tmp_path / "moved.parquet")
        with pytest.raises(DataFileError, match=f"data file.*missing.*{victim.rsplit('/', 1)[-1]}"):
            loader(mixture)
        with open(victim, "wb") as f:  # present but truncated: found when read, never skipped
            f.write(backup.read_bytes()[:100])
        with (
            loader(mixture) as source,
            pytest.raises(DataFileError, match=f"cannot read data file.*{victim.rsplit('/', 1)[-1]}"),
        ):
            take(source, 40)
    finally:
        shutil.copy(backup, victim)


def test_metrics_count_tokens_per_component(mixture):
    from prometheus_client import REGISTRY

    before = REGISTRY.get_sample_value("factory_loader_tokens_total", {"component": "code"}) or 0
    with loader(mixture) as source:
        take(source, 10)
        stats = source.metrics.as_dict()
        summary = source.metrics.summary()
    assert stats["batches"] == 10 and sum(stats["sequences"].values()) == 80
    assert (
        REGISTRY.get_sample_value("factory_loader_tokens_total", {"component": "code"}) - before
        == stats["tokens"]["code"]
    )
    assert REGISTRY.get_sample_value("factory_loader_target_share", {"component": "text"}) == pytest.approx(0.6)
    assert "tokens/s" in summary and "text" in summary and stats["wait_s"] > 0
    assert np.isclose(sum(stats["token_share"].values()), 1)

    # A held-out loader (the trainer builds one per evaluation) is not the training stream: its
    # batches were counted in the process's factory_loader_* series (its targets replaced theirs).
    counted = REGISTRY.get_sample_value("factory_loader_batches_total")
    with loader(mixture, split="heldout", num_shards=1, global_batch_size=2) as held:
        take(held, 3)
        assert held.metrics.as_dict()["batches"] == 3
    assert REGISTRY.get_sample_value("factory_loader_batches_total") == counted
    assert REGISTRY.get_sample_value("factory_loader_target_share", {"component": "text"}) == pytest.approx(0.6)


def test_merge_states_refuses_states_of_different_steps(mixture):
    with loader(mixture, dp_world=2, dp_rank=0) as r0, loader(mixture, dp_world=2, dp_rank=1) as r1:
        next(r0)
        with pytest.raises(LoaderStateError, match="disagree on 'batch'"):
            merge_states([r0.state_dict(), r1.state_dict()])


def test_local_read_ahead_starts_from_each_sub_stream_s_third_unit(mixture):
    from streaming_loader.local_backend import LocalBackend

    with StreamingLoader.from_manifest(mixture.manifest, mixture.tokenizer, **{**SMALL, "backend": "local"}) as source:
        backend = LocalBackend(source.plan, source.tokenizer, prefetch=1)
    asked, read = [], backend._read
    backend._read = lambda unit: asked.append(unit) or read(unit)
    try:
        streams = [backend.open(0, shard, 0, 0) for shard in range(3)]
        for stream in streams:
            next(stream)
        assert [u.shard for u in asked] == [0, 1, 2]  # a first unit each, asked at open
        next(streams[0])
        assert len(asked) == 4  # the second alone: a first batch needing it waits behind no third
        next(streams[0])
        assert [u.shard for u in asked[4:]] == [0, 0]  # the third, and from then on one unit ahead
        next(streams[0])
        assert len(asked) == 7
    finally:
        backend.close()
