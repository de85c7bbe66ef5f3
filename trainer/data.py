"""The trainer's side of the data: the streaming loader per rank, held-out loaders, and lineage."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lakehouse.catalog import EMBEDDED_CATALOG_NAME
from lakehouse.catalog import load_catalog as load_named_catalog
from lakehouse.redact import redact
from trainer.config import Config
from trainer.lineage import pipeline_runs
from trainer.parallel import World

if TYPE_CHECKING:
    from streaming_loader import StreamingLoader

log = logging.getLogger("factory.trainer")


def _loader(cfg: Config, rank: int, ranks: int, split: str, manifest: str = "", **options: Any):
    from streaming_loader import StreamingLoader

    return StreamingLoader.from_manifest(
        manifest or cfg.data.manifest,
        tokenizer=cfg.data.tokenizer,
        seq_len=cfg.data.seq_len,
        global_batch_size=cfg.data.global_batch_size,
        dp_rank=rank,
        dp_world=ranks,
        backend=cfg.data.backend,
        split=split,
        log_interval_s=0,
        **options,
    )


def build_loader(cfg: Config, world: World):
    """This rank's training loader and the tokenizer's vocabulary size."""
    loader = _loader(cfg, world.rank, world.size, "train", num_shards=cfg.data.num_shards or None)
    return loader, loader.tokenizer.vocab_size


def build_eval_loader(cfg: Config, world: World):
    """A fresh loader over the manifest's held-out split: the same batches at every evaluation,
    whole global batches on every rank (each scores its rows of them, ``eval_rows``).

    One logical shard, read by every rank as a 1-rank run reads it: a held-out split is small, and
    the training stream's many shards (each needing documents of every component) would split it
    too thin; and as the shards would be the ranks', the batches would change with the world size.
    So the held-out loss of a checkpoint is the same on any number of ranks. ``eval.manifest``,
    when set, is read instead of the training manifest: runs on other mixtures of the same
    snapshots then evaluate the same batches. (``world`` is unused: it is kept for the callers.)
    """
    return _loader(cfg, 0, 1, "heldout", cfg.eval.manifest, num_shards=1)


def eval_rows(batch: dict[str, Any], world: World) -> dict[str, Any]:
    """This rank's equal share of the rows of a whole held-out global batch."""
    share = batch["input_ids"].shape[0] // world.size
    return {key: value[world.rank * share : (world.rank + 1) * share] for key, value in batch.items()}


def merge_loader_states(states: list[dict], world: World) -> dict | list[dict]:
    """The state this rank resumes from: its own when the world is unchanged, else every rank's
    (the loader picks the cursors of the logical shards this rank now serves)."""
    return states[world.rank] if len(states) == world.size else states


def lineage_base(cfg: Config, loader: StreamingLoader) -> dict[str, Any]:
    """The parts of a checkpoint's lineage that do not change during the run: the manifest and
    tokenizer as the loader read them (its sha256 is the one the stream is defined by)."""
    manifest = loader.manifest
    components = [
        {
            "name": c.name,
            "table": c.table,
            "snapshot_id": c.snapshot_id,
            "ref": c.ref,
            "weight": c.weight,
            "filter": c.filter,
            "heldout_fraction": c.heldout_fraction,
            "files": len(c.files),
            "records": c.record_count,
        }
        for c in manifest.components
    ]
    lineage: dict[str, Any] = {
        "manifest": {
            "path": str(Path(cfg.data.manifest).resolve()),
            "name": manifest.name,
            "fingerprint": manifest.fingerprint,
            "seed": manifest.seed,
            # Redacted again: a manifest pinned by an older version may hold a password.
            "catalog": {key: redact(value) for key, value in manifest.catalog.items()},
            "pinned_at": manifest.pinned_at,
            **({"provenance": manifest.provenance} if manifest.provenance else {}),
        },
        "tokenizer": {"path": str(Path(cfg.data.tokenizer).resolve()), "sha256": loader.tokenizer.sha256},
        "config": cfg.to_dict(),
        "components": components,
    }
    try:
        catalog = _catalog_of(manifest.catalog)
        memo: dict = {}
        for entry in components:
            entry["runs"] = pipeline_runs(catalog, entry["table"], entry["snapshot_id"], memo)
    except Exception as exc:  # the run goes on: training must not stop because the catalog is unreachable
        reason = f"{type(exc).__name__}: {redact(str(exc))}"  # a driver's message may repeat the URI
        log.warning("lineage: pipeline runs unavailable (%s); checkpoints record the manifest only", reason)
        lineage["lineage_error"] = reason
    return lineage


def _catalog_of(record: dict[str, str]):
    """The catalog a manifest was pinned in: the embedded one at its recorded SQLite URI, or a
    named one from pyiceberg configuration (never from the recorded URI, whose credentials are
    redacted)."""
    from pyiceberg.catalog import load_catalog

    name, uri = record.get("name"), record.get("uri", "")
    if name == EMBEDDED_CATALOG_NAME and uri.startswith("sqlite"):
        return load_catalog(name, type="sql", uri=uri)
    return load_named_catalog(name)
