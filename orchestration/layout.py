"""Where a factory keeps its files, under ``$FACTORY_HOME/factories/<name>/`` (docs/factory.md,
"Files"): the tokenizer, each mixture's manifests, each run's training folders, the gates' and
experiments' specs. A step's output that later steps read is named by a small JSON pointer
(``current.json``), written whole or not at all, so a reader never sees half of one."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from lakehouse.local_files import write_atomically
from orchestration.definition import FactoryDefinition

CURRENT = "current.json"


def tokenizer_path(definition: FactoryDefinition) -> Path:
    """Named by the tokenizer's settings: other settings, another tokenizer (and other runs)."""
    settings = json.dumps(asdict(definition.tokenizer), sort_keys=True)
    return definition.folder() / f"tokenizer-{hashlib.sha256(settings.encode()).hexdigest()[:12]}.json"


def mixture_folder(definition: FactoryDefinition, mixture: str) -> Path:
    return definition.folder() / "mixtures" / mixture


def run_folder(definition: FactoryDefinition, run: str) -> Path:
    return definition.folder() / "runs" / run


def experiment_folder(definition: FactoryDefinition, name: str) -> Path:
    return definition.folder() / "experiments" / name


def read_current(folder: Path) -> dict[str, Any] | None:
    """What ``folder``'s step made last, or None if it has made nothing yet."""
    path = folder / CURRENT
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def write_current(folder: Path, record: dict[str, Any]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    write_atomically(folder / CURRENT, json.dumps(record, indent=2, sort_keys=True) + "\n")
