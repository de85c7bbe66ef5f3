"""Checkpoints: ``<run_dir>/checkpoints/step-<N>/`` (docs/architecture.md, "Checkpoints").

Each holds a torch.distributed.checkpoint (DCP) of the model and optimizer, sharded as trained
and reshardable to another number of ranks; per rank a JSON file (step, scheduler, loader
state) and the RNG states; ``lineage.json``; and last, the ``COMPLETE`` marker. A directory
without the marker (a crash mid-save) is ignored and replaced by the next save of that step.
Finding them is ``trainer/checkpoint_paths.py``, which imports no torch.
Every file and folder name is fsynced before ``COMPLETE`` is written (and it too), so a power
loss cannot leave a complete-looking checkpoint with a torn file.

Trust boundary: DCP pickles its ``.metadata`` index and the optimizer's non-tensor values
(param groups). ``load`` reads them through ``trainer.checkpoint_reader``: the index with an
unpickler that builds only DCP's metadata classes, the values (like the tensors and RNG states)
with ``torch.load(weights_only=True)``; anything else is refused with a ``CheckpointError``
without running it. Everything else this module writes is JSON. A crafted checkpoint can still
set any weights, step or loader position: load only checkpoints you (or your pipeline) wrote.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import shutil
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

from lakehouse.errors import CheckpointError
from lakehouse.faults import maybe_fail
from lakehouse.local_files import write_atomically
from lakehouse.storage_errors import storage_error
from trainer.checkpoint_paths import COMPLETE, checkpoints_dir, complete_checkpoints, step_of
from trainer.checkpoint_paths import latest_checkpoint as latest_checkpoint  # where callers have found it
from trainer.checkpoint_paths import step_dir as step_dir
from trainer.checkpoint_reader import DAMAGED, SafeFileSystemReader, SafeLoadPlanner, first_line, is_damage, load_plain
from trainer.parallel import World, barrier


@dataclass
class Resumed:
    step: int
    loader_states: list[dict]  # every saved rank's loader state, by rank
    rank_state: dict  # this rank's saved JSON (or rank 0's when the world grew)


def save(
    run_dir: Path,
    step: int,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    loader_state: dict,
    lineage: dict,
    world: World,
    keep: int,
) -> Path:
    """Save step ``step`` on every rank; returns the checkpoint directory."""
    path = checkpoints_dir(run_dir) / f"step-{step}"
    if world.is_main and path.exists():  # a partial save of this step from a crashed run
        shutil.rmtree(path)
    barrier(world)
    model_state, optim_state = get_state_dict(model, optimizer)
    try:
        with _single_process_quiet():
            # DCP's file writer fsyncs each file it writes, .metadata before its rename (sync_files=True).
            dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=str(path), no_dist=world.mesh is None)
    except (Exception, CheckpointException) as exc:  # DCP's own error is a BaseException
        if _disk_full(path):  # torch's writer may report a full disk only as a short write ("unexpected pos")
            raise storage_error(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))) from exc
        raise
    rank_state = {"step": step, "world_size": world.size, "scheduler": scheduler.state_dict(), "loader": loader_state}
    _write_json(path / f"rank-{world.rank}.json", rank_state)
    rng = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        rng["cuda"] = torch.cuda.get_rng_state()
    buffer = io.BytesIO()
    torch.save(rng, buffer)
    write_atomically(path / f"rng-rank-{world.rank}.pt", buffer.getvalue())
    barrier(world)  # every rank's files are on disk
    if world.is_main:
        # Writing lineage.json syncs the folder, and with it the names of every file above.
        _write_json(path / "lineage.json", lineage)
        maybe_fail(f"checkpoint-step-{step}-before-complete")
        _write_json(path / COMPLETE, {"step": step, "world_size": world.size})
        _prune(run_dir, keep)
    barrier(world)
    return path


def load(
    path: Path,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    world: World,
) -> Resumed:
    """Restore model, optimizer, scheduler and RNG from ``path``, resharding DCP if the world changed.

    Every file is checked before it is used: a missing, damaged or crafted one is a
    ``CheckpointError`` naming it (the small JSON files first, before the weights are read)."""
    saved = _read_marker(path)
    states = [_rank_state(path, rank, saved) for rank in range(saved["world_size"])]
    model_state, optim_state = get_state_dict(model, optimizer)
    state = {"model": model_state, "optim": optim_state}
    read_state(path, state, no_dist=world.mesh is None)
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])

    source = world.rank if world.rank < saved["world_size"] else 0  # a grown world: new ranks take rank 0's
    mine = states[source]
    scheduler.load_state_dict(mine["scheduler"])
    _restore_rng(path / f"rng-rank-{source}.pt")
    return Resumed(mine["step"], [s["loader"] for s in states], mine)


def _read_marker(path: Path) -> dict:
    """The ``COMPLETE`` marker of checkpoint ``path``: ``{"step", "world_size"}``, checked.

    An unreadable marker is refused, not skipped by ``latest_checkpoint``: it is written last and
    atomically, so a damaged one is no interrupted save, and quietly resuming from an older
    checkpoint would retrain (and, with ``checkpoint.keep``, prune) past it unasked."""
    marker = _read_json(path / COMPLETE)
    _check_counts(marker, path / COMPLETE)
    return marker


def _rank_state(path: Path, rank: int, saved: dict) -> dict:
    """``rank-<rank>.json``: the step and world of the marker, the scheduler's and loader's state."""
    file = path / f"rank-{rank}.json"
    state = _read_json(file)
    _check_counts(state, file)
    for key in ("step", "world_size"):
        if state[key] != saved[key]:
            raise CheckpointError(f"{file} says {key} {state[key]}, its {COMPLETE} marker {saved[key]}; {DAMAGED}")
    for key in ("scheduler", "loader"):
        if not isinstance(state.get(key), dict):
            raise CheckpointError(f"{file} has no {key} state (an object); {DAMAGED}")
    return state


def _check_counts(value: dict, file: Path) -> None:
    """``step`` a whole number >= 0 and ``world_size`` one > 0 (a crafted -7 would name ``step--6`` folders)."""
    for key, least in (("step", 0), ("world_size", 1)):
        found = value.get(key)
        if not isinstance(found, int) or isinstance(found, bool) or found < least:
            raise CheckpointError(f"{file}: {key} should be a whole number >= {least}, got {found!r}; {DAMAGED}")


def _read_json(file: Path) -> dict:
    try:
        value = json.loads(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise CheckpointError(f"cannot read {file}: {exc.strerror or exc}; {DAMAGED}") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
        raise CheckpointError(f"{file} is not JSON ({exc}); {DAMAGED}") from None
    if not isinstance(value, dict):
        raise CheckpointError(f"{file} holds a {type(value).__name__}, not a JSON object; {DAMAGED}")
    return value


def _restore_rng(file: Path) -> None:
    states = load_plain(file, str(file))
    if (
        not isinstance(states, dict)
        or "cpu" not in states
        or not all(isinstance(v, torch.Tensor) for v in states.values())
    ):
        raise CheckpointError(f"{file} does not hold RNG states (a cpu tensor); {DAMAGED}")
    try:
        torch.set_rng_state(states["cpu"])
        if "cuda" in states and torch.cuda.is_available():
            torch.cuda.set_rng_state(states["cuda"])
    except (RuntimeError, TypeError) as exc:  # a tensor of the wrong size or type
        raise CheckpointError(f"{file} does not hold RNG states ({exc}); {DAMAGED}") from None


def read_state(path: Path, state: dict, no_dist: bool) -> None:
    """Fill ``state`` (any subset of the saved keys, e.g. only ``{"model": …}``) in place from the
    DCP checkpoint at ``path``, resharded to the tensors given, through the safe reader."""
    reader = SafeFileSystemReader(path)
    reader.read_metadata()  # refuses a crafted index here, before DCP's own error handling wraps it
    with _single_process_quiet():
        try:
            dcp.load(state, storage_reader=reader, planner=SafeLoadPlanner(), no_dist=no_dist)
        except CheckpointException as exc:  # DCP gathers every rank's failure into one exception
            failures = [e for e, _ in exc.failures.values()]
            refused = [e for e in failures if isinstance(e, CheckpointError)]
            if refused:
                raise refused[0] from None
            damage = [e for e in failures if is_damage(e)]
            if damage:  # a shard file missing or cut short: its own message is every rank's traceback
                raise CheckpointError(
                    f"{path} cannot be read: a file of it is missing or damaged ({first_line(damage[0])}); {DAMAGED}"
                ) from None
            raise


def _prune(run_dir: Path, keep: int) -> None:
    """Remove complete checkpoints beyond the newest ``keep``, and partial ones older than those kept."""
    done = complete_checkpoints(run_dir)
    for _, old in done[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    oldest_kept = done[-keep:][0][0] if done else 0
    for path in checkpoints_dir(run_dir).iterdir():
        step = step_of(path)
        if step is not None and step < oldest_kept and not (path / COMPLETE).exists():
            shutil.rmtree(path, ignore_errors=True)


def _disk_full(folder: Path) -> bool:
    """Whether the file system holding ``folder`` now refuses even a small file."""
    probe = folder / f".space-probe-{os.getpid()}"
    try:
        with open(probe, "wb") as out:
            out.write(bytes(1 << 20))
            out.flush()
            os.fsync(out.fileno())
    except OSError as exc:
        return exc.errno in (errno.ENOSPC, errno.EDQUOT)
    finally:
        with contextlib.suppress(OSError):
            probe.unlink()
    return False


@contextlib.contextmanager
def _single_process_quiet() -> Iterator[None]:
    """DCP warns that it assumes one process when there is no process group: here that is intended."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        yield


def _write_json(path: Path, value: dict) -> None:
    write_atomically(path, json.dumps(value, indent=2, sort_keys=True))
