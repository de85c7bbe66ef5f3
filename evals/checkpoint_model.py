"""A checkpoint as one process sees it: the model's weights, its config, tokenizer and lineage.

The model is rebuilt from the resolved config the checkpoint's lineage recorded and its weights
read from the DCP checkpoint, whatever number of ranks saved it (DCP reshards on load), through
the trainer's safe reader (``trainer/checkpoint_reader.py``): nothing in the checkpoint is
unpickled outside its allow-list. The optimizer state stays on disk.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.distributed.checkpoint.api import CheckpointException

from lakehouse.errors import CheckpointError, InputError, ManifestError
from mixtures.manifest import Manifest
from streaming_loader.tokenize import TokenizerSpec, load_tokenizer_spec
from trainer.checkpoint import COMPLETE, read_state
from trainer.config import Config, load_config
from trainer.lineage import read_lineage, resolve_checkpoint
from trainer.model import Transformer


@dataclass
class LoadedCheckpoint:
    path: Path  # the checkpoint folder, absolute
    step: int
    lineage: dict[str, Any]
    config: Config  # the run's resolved config, data paths as the lineage recorded them
    model: Transformer  # in eval mode, on ``device``
    tokenizer: TokenizerSpec
    device: torch.device
    identity: str  # sha256 of the checkpoint's index and lineage: what "the same checkpoint" means

    @property
    def run_dir(self) -> Path:
        return self.path.parent.parent

    @property
    def manifest_fingerprint(self) -> str:
        return self.lineage["manifest"]["fingerprint"]

    @property
    def snapshot_ids(self) -> dict[str, int]:
        return {c["table"]: int(c["snapshot_id"]) for c in self.lineage.get("components", [])}


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def require_weights(path: Path) -> None:
    """Refuse a checkpoint folder without its weights' index (what lineage alone does not need)."""
    if not (path / ".metadata").is_file():
        raise InputError(f"{path} is not a checkpoint (no .metadata, the index of its weights)")


def checkpoint_identity(path: Path) -> str:
    """sha256 of the DCP index, the completion marker and lineage.json: two saves of a step with
    other weights or data differ here, a copy of the same folder does not."""
    require_weights(path)
    digest = hashlib.sha256()
    for name in (".metadata", COMPLETE, "lineage.json"):
        digest.update(name.encode() + b"\0" + (path / name).read_bytes() + b"\0")
    return digest.hexdigest()


def load_checkpoint(
    path: str | Path, device: torch.device | None = None, check_manifest: bool = True
) -> LoadedCheckpoint:
    """The model of a complete checkpoint, ready to evaluate in this one process. ``check_manifest``:
    the manifest it trained on must be there, unchanged (evals read its held-out split; an export
    of the weights needs only the lineage's record of it)."""
    path = resolve_checkpoint(path)
    require_weights(path)
    lineage = read_lineage(path, with_config=True)
    device = device or default_device()
    manifest_path = lineage["manifest"]["path"]
    tokenizer_path = lineage["tokenizer"]["path"]
    config = load_config(
        None,
        [f"data.manifest={json.dumps(manifest_path)}", f"data.tokenizer={json.dumps(tokenizer_path)}"],
        raw=lineage["config"],
    )
    # Evaluation needs no Ray: the stream is the same on either backend (docs/architecture.md, "The stream").
    config.data.backend = "local"
    tokenizer = _checked_tokenizer(tokenizer_path, lineage["tokenizer"]["sha256"])
    if check_manifest:
        _check_manifest(manifest_path, lineage["manifest"]["fingerprint"])
    model = Transformer(config.model)
    _load_weights(path, model)
    model.to(device).eval()
    return LoadedCheckpoint(
        path, int(lineage["step"]), lineage, config, model, tokenizer, device, checkpoint_identity(path)
    )


def _load_weights(path: Path, model: nn.Module) -> None:
    # Only the model's keys are asked for: the optimizer's state is not read.
    state = {"model": model.state_dict()}
    try:
        read_state(path, state, no_dist=True)
    except (RuntimeError, CheckpointException) as exc:
        # a key or shape the checkpoint does not have (a missing or damaged file is read_state's CheckpointError)
        raise CheckpointError(f"{path} does not hold the model its lineage describes: {_first_failure(exc)}") from None
    model.load_state_dict(state["model"])


def _first_failure(exc: BaseException) -> BaseException:
    """What failed under DCP's ``CheckpointException``, whose own message is every rank's traceback."""
    if isinstance(exc, CheckpointException) and exc.failures:
        return next(iter(exc.failures.values()))[0]
    return exc


def _checked_tokenizer(path: str, sha256: str) -> TokenizerSpec:
    spec = load_tokenizer_spec(path)
    if spec.sha256 != sha256:
        raise InputError(
            f"the tokenizer {path} changed since the checkpoint was trained (sha256 {spec.sha256[:12]}…, "
            f"lineage records {sha256[:12]}…); restore the file the run used"
        )
    return spec


def _check_manifest(path: str, fingerprint: str) -> None:
    try:
        manifest = Manifest.load(path)
    except ManifestError as exc:
        raise InputError(
            f"{exc}: the checkpoint was trained on it (fingerprint {fingerprint[:16]}…); restore the file the run "
            "used, or pin the same mixture again with `factory mix pin` to that path"
        ) from None
    if manifest.fingerprint != fingerprint:
        raise InputError(
            f"the manifest {path} is not the one the checkpoint was trained on (fingerprint "
            f"{manifest.fingerprint}, lineage records {fingerprint}); restore the file the run used"
        )
