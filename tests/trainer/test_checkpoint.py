"""Checkpoints in one process (the 2-rank paths run under torchrun in test_train.py)."""

from __future__ import annotations

import enum
import io
import json
import os
import pathlib
import pickle

import pytest
import torch

from lakehouse.errors import CheckpointError
from tests.durability import record_syncs
from trainer import checkpoint
from trainer.config import ModelConfig
from trainer.model import Transformer
from trainer.parallel import World

WORLD = World(rank=0, size=1, local_rank=0, device=torch.device("cpu"), mesh=None)


def setup(seed: int):
    model = Transformer(ModelConfig(preset="tiny", vocab_size=50, max_seq_len=16))
    model.init_weights(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1 / (s + 1))
    return model, optimizer, scheduler


def one_step(model, optimizer, scheduler) -> None:
    tokens = torch.randint(0, 50, (2, 9))
    loss = torch.nn.functional.cross_entropy(model(tokens[:, :-1]).flatten(0, 1), tokens[:, 1:].flatten())
    loss.backward()
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad()


def test_save_and_load_restore_everything(tmp_path):
    model, optimizer, scheduler = setup(0)
    one_step(model, optimizer, scheduler)
    path = checkpoint.save(tmp_path, 1, model, optimizer, scheduler, {"batch": 1}, {"who": "me"}, WORLD, keep=3)
    expected_next = torch.rand(3)  # what the RNG gives right after the save

    other, other_opt, other_sched = setup(1)
    resumed = checkpoint.load(path, other, other_opt, other_sched, WORLD)
    assert resumed.step == 1 and resumed.loader_states == [{"batch": 1}]
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), other.parameters(), strict=True))
    assert other_sched.get_last_lr() == scheduler.get_last_lr()
    assert torch.equal(torch.rand(3), expected_next)
    saved_state, restored_state = optimizer.state_dict()["state"], other_opt.state_dict()["state"]
    assert all(torch.equal(saved_state[k]["exp_avg"], restored_state[k]["exp_avg"]) for k in saved_state)
    assert json.loads((path / "lineage.json").read_text()) == {"who": "me"}


def test_partial_checkpoints_are_ignored_and_old_ones_pruned(tmp_path):
    model, optimizer, scheduler = setup(0)
    for step in (1, 2, 3):
        checkpoint.save(tmp_path, step, model, optimizer, scheduler, {}, {}, WORLD, keep=2)
    assert [s for s, _ in checkpoint.complete_checkpoints(tmp_path)] == [2, 3]
    crashed = checkpoint.checkpoints_dir(tmp_path) / "step-4"
    crashed.mkdir()
    (crashed / "rank-0.json").write_text("{half")  # a save that died before its marker
    assert checkpoint.latest_checkpoint(tmp_path)[0] == 3
    # Saving that step again replaces the partial folder.
    checkpoint.save(tmp_path, 4, model, optimizer, scheduler, {}, {}, WORLD, keep=2)
    assert [s for s, _ in checkpoint.complete_checkpoints(tmp_path)] == [3, 4]
    assert json.loads((crashed / "rank-0.json").read_text())["step"] == 4


def test_every_file_is_synced_before_complete_is_published(tmp_path, monkeypatch):
    model, optimizer, scheduler = setup(0)
    events = record_syncs(monkeypatch)
    path = checkpoint.save(tmp_path, 1, model, optimizer, scheduler, {"batch": 1}, {"who": "me"}, WORLD, keep=3)
    complete = events.renamed_to(path / checkpoint.COMPLETE)
    assert events.first("fsync", events[complete][1]) < complete
    for written in path.iterdir():
        if written.name == checkpoint.COMPLETE:
            continue
        real = os.path.realpath(written)
        # Synced under its own name or under the temporary name it was renamed from.
        before = [e for e in events[:complete] if e[0] == "fsync" and e[1] in (real, real + ".tmp")]
        assert before, f"{written.name} was not synced before COMPLETE"
    folder = os.path.realpath(path)
    last_rename = max(i for i, e in enumerate(events[:complete]) if e[0] == "rename")
    assert any(e == ("fsync", folder) for e in events[last_rename:complete])  # the names are durable too
    assert events.last("fsync", folder) > complete
    assert events.synced(checkpoint.checkpoints_dir(tmp_path))


class _CreatesMarker:
    """Unpickling this creates a file: what a crafted checkpoint would do to run code."""

    def __init__(self, marker) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_a_crafted_metadata_file_is_refused_without_running_it(tmp_path):
    model, optimizer, scheduler = setup(0)
    path = checkpoint.save(tmp_path, 1, model, optimizer, scheduler, {}, {}, WORLD, keep=3)
    marker = tmp_path / "ran"
    (path / ".metadata").write_bytes(pickle.dumps(_CreatesMarker(marker)))

    with pytest.raises(CheckpointError, match=r"\.metadata.*io\.open is not part of.*refused without running it"):
        checkpoint.load(path, *setup(1), WORLD)
    assert not marker.exists()


def test_a_crafted_optimizer_value_is_refused_without_running_it(tmp_path):
    """DCP stores non-tensor values (the optimizer's param groups) as pickles in the shard files."""
    from torch.distributed.checkpoint.filesystem import _StorageInfo
    from torch.distributed.checkpoint.metadata import MetadataIndex

    model, optimizer, scheduler = setup(0)
    path = checkpoint.save(tmp_path, 1, model, optimizer, scheduler, {}, {}, WORLD, keep=3)
    marker = tmp_path / "ran"
    payload = io.BytesIO()
    torch.save(_CreatesMarker(marker), payload)
    shard = path / "__0_0.distcp"
    offset = shard.stat().st_size
    with shard.open("ab") as f:
        f.write(payload.getvalue())
    metadata = pickle.loads((path / ".metadata").read_bytes())  # the real one: only DCP's classes
    key = MetadataIndex("optim.param_groups.0.lr")
    metadata.storage_data[key] = _StorageInfo("__0_0.distcp", offset, len(payload.getvalue()))
    (path / ".metadata").write_bytes(pickle.dumps(metadata))

    with pytest.raises(
        CheckpointError, match=r"'optim\.param_groups\.0\.lr' is not plain data \(Unsupported global: GLOBAL io\.open"
    ):
        checkpoint.load(path, *setup(1), WORLD)
    assert not marker.exists()


class _ByName(pickle.Pickler):
    """Pickles enum members as ``getattr(EnumClass, "NAME")``, as Debian's Python 3.11.2 does."""

    def reducer_override(self, obj):
        if isinstance(obj, enum.Enum):
            return getattr, (type(obj), obj.name)
        return NotImplemented


def test_a_checkpoint_whose_index_holds_enum_members_by_name_loads(tmp_path):
    model, optimizer, scheduler = setup(0)
    one_step(model, optimizer, scheduler)
    path = checkpoint.save(tmp_path, 1, model, optimizer, scheduler, {"batch": 1}, {}, WORLD, keep=3)
    metadata = pickle.loads((path / ".metadata").read_bytes())
    written = io.BytesIO()
    _ByName(written).dump(metadata)
    assert b"getattr" in written.getvalue()
    (path / ".metadata").write_bytes(written.getvalue())

    other, other_opt, other_sched = setup(1)
    assert checkpoint.load(path, other, other_opt, other_sched, WORLD).step == 1
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), other.parameters(), strict=True))


class _TouchesMarker:
    """Unpickling this calls a bound method, which pickle writes as ``getattr(obj, name)``."""

    def __init__(self, marker) -> None:
        self.marker = pathlib.Path(marker)

    def __reduce__(self):
        return (self.marker.touch, ())


def test_getattr_in_a_metadata_file_reaches_only_enum_members(tmp_path):
    model, optimizer, scheduler = setup(0)
    path = checkpoint.save(tmp_path, 1, model, optimizer, scheduler, {}, {}, WORLD, keep=3)
    marker = tmp_path / "ran"
    (path / ".metadata").write_bytes(pickle.dumps(_TouchesMarker(marker)))

    with pytest.raises(
        CheckpointError, match=r"getattr of PosixPath\.touch is not part of.*refused without running it"
    ):
        checkpoint.load(path, *setup(1), WORLD)
    assert not marker.exists()


def _damage_json(name: str, change):
    def damage(path):
        file = path / name
        file.write_text(json.dumps(change(json.loads(file.read_text()))))

    return damage


def _truncate(name: str, size: int):
    def damage(path):
        file = path / name
        file.write_bytes(file.read_bytes()[:size])

    return damage


# Each: a file of a complete checkpoint damaged or crafted, and what the refusal says.
_DAMAGES = {
    "empty COMPLETE": (lambda p: (p / "COMPLETE").write_text(""), r"COMPLETE is not JSON"),
    "COMPLETE a list": (lambda p: (p / "COMPLETE").write_text("[1]"), r"COMPLETE holds a list, not a JSON object"),
    "world grown in COMPLETE": (
        _damage_json("COMPLETE", lambda v: {**v, "world_size": 3}),
        r"rank-0\.json says world_size 1, its COMPLETE marker 3",
    ),
    "no world in COMPLETE": (
        _damage_json("COMPLETE", lambda v: {"step": v["step"]}),
        r"COMPLETE: world_size should be a whole number >= 1, got None",
    ),
    "rank json removed": (lambda p: (p / "rank-0.json").unlink(), r"cannot read .*rank-0\.json: No such file"),
    "step a word": (
        _damage_json("rank-0.json", lambda v: {**v, "step": "four"}),
        r"rank-0\.json: step should be a whole number >= 0, got 'four'",
    ),
    "negative step": (
        _damage_json("rank-0.json", lambda v: {**v, "step": -7}),
        r"rank-0\.json: step should be a whole number >= 0, got -7",
    ),
    "step other than the marker's": (
        _damage_json("rank-0.json", lambda v: {**v, "step": 9}),
        r"rank-0\.json says step 9, its COMPLETE marker 1",
    ),
    "no loader state": (
        _damage_json("rank-0.json", lambda v: {**v, "loader": "x"}),
        r"rank-0\.json has no loader state",
    ),
    "rng removed": (lambda p: (p / "rng-rank-0.pt").unlink(), r"rng-rank-0\.pt cannot be read \(FileNotFoundError"),
    "rng truncated": (_truncate("rng-rank-0.pt", 50), r"rng-rank-0\.pt cannot be read \(RuntimeError"),
    "rng not tensors": (
        lambda p: torch.save({"cpu": [1, 2]}, p / "rng-rank-0.pt"),
        r"rng-rank-0\.pt does not hold RNG states",
    ),
    "shard truncated": (
        _truncate("__0_0.distcp", 100_000),
        r"step-1 cannot be read: a file of it is missing or damaged \(RuntimeError: PytorchStreamReader",
    ),
}


@pytest.mark.parametrize("damage", list(_DAMAGES))
def test_a_damaged_checkpoint_file_is_refused_naming_it(tmp_path, damage):
    model, optimizer, scheduler = setup(0)
    path = checkpoint.save(tmp_path, 1, model, optimizer, scheduler, {"batch": 1}, {}, WORLD, keep=3)
    change, message = _DAMAGES[damage]
    change(path)
    assert checkpoint.latest_checkpoint(tmp_path) == (1, path)  # refused, not skipped for an older one

    with pytest.raises(CheckpointError, match=message) as refused:
        checkpoint.load(path, *setup(1), WORLD)
    assert "the checkpoint is damaged: use an earlier one" in str(refused.value)


def test_a_crafted_rng_file_is_refused_without_running_it(tmp_path):
    model, optimizer, scheduler = setup(0)
    path = checkpoint.save(tmp_path, 1, model, optimizer, scheduler, {}, {}, WORLD, keep=3)
    marker = tmp_path / "ran"
    torch.save({"cpu": _CreatesMarker(marker)}, path / "rng-rank-0.pt")

    with pytest.raises(CheckpointError, match=r"rng-rank-0\.pt is not plain data \(Unsupported global") as refused:
        checkpoint.load(path, *setup(1), WORLD)
    assert "weights_only=False" not in str(refused.value) and len(str(refused.value).splitlines()) == 1
    assert not marker.exists()
