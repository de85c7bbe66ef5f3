"""A small two-component mixture, pinned, with a tokenizer trained on it; and one Ray per session."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from lakehouse.catalog import embedded_catalog_properties
from mixtures.pin import pin
from mixtures.spec import spec_from_dict
from streaming_loader.tokenizer_train import train_tokenizer
from tests.corpora import make_table

# Settings that make a tiny corpus exercise many units, blocks and epochs.
SMALL = {"seq_len": 48, "global_batch_size": 8, "shuffle_window": 8, "read_bytes": 1500, "log_interval_s": 0}


@dataclass(frozen=True)
class Mixture:
    home: Path
    manifest: Path
    filtered: Path
    tokenizer: Path
    catalog: object


@pytest.fixture(scope="session")
def mixture(tmp_path_factory) -> Mixture:
    from pyiceberg.catalog import load_catalog

    home = tmp_path_factory.mktemp("loader-home")
    (home / "warehouse").mkdir()
    catalog = load_catalog("loader-tests", **embedded_catalog_properties(home))
    make_table(catalog, "raw.text", 160, files=3, row_group_rows=25)
    make_table(catalog, "raw.code", 120, kind="code", files=2, seed=1)
    components = [
        {"name": "text", "table": "raw.text", "weight": 0.6},
        {"name": "code", "table": "raw.code", "weight": 0.4, "heldout_fraction": 0.15},
    ]
    manifest, filtered = home / "manifest.json", home / "filtered.json"
    pin(catalog, spec_from_dict({"seed": 3, "components": components})).save(manifest)
    components[1]["filter"] = "lang = 'python'"
    pin(catalog, spec_from_dict({"seed": 3, "components": components})).save(filtered)
    tokenizer = home / "tokenizer.json"
    tokenizer.write_text(train_tokenizer(catalog, ["raw.text", "raw.code"], 400).text)
    return Mixture(home, manifest, filtered, tokenizer, catalog)


@dataclass(frozen=True)
class RayCluster:
    raylet_pid: int
    """The parent of every worker process of this cluster."""
    spill_dir: Path
    """Where Ray would spill objects to disk (the loader must never make it)."""
    session_dir: Path


@pytest.fixture(scope="package")
def ray_cluster(tmp_path_factory) -> RayCluster:
    """One local Ray for this folder's tests (it takes 5-10 s to start), shut down when the tests
    of another folder follow: theirs start Ray with settings of their own."""
    import ray

    os.environ.setdefault("RAY_DISABLE_USAGE_STATS", "1")
    spill = tmp_path_factory.mktemp("ray-spill")
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        object_store_memory=300 << 20,
        logging_level="WARNING",
        _system_config={
            "object_spilling_config": json.dumps({"type": "filesystem", "params": {"directory_path": str(spill)}})
        },
    )
    node = ray._private.worker._global_node  # the only way to the raylet's pid (to kill its workers)
    yield RayCluster(node.all_processes["raylet"][0].process.pid, spill, Path(node.get_session_dir_path()))
    ray.shutdown()
