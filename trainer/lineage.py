"""What data made a checkpoint: manifest → snapshots → the pipeline runs behind them → raw inputs.

Every job records its run in the snapshot summary it commits (``factory.*``), including the
snapshots it read. Walking those records from the manifest's snapshots back to ingest gives
the chain; ingest's inputs (file URIs) are the leaves.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pyiceberg.catalog import Catalog
from pyiceberg.table.snapshots import Operation, ancestors_of

from lakehouse.commit import recorded_inputs, recorded_params, snapshot_stats, summary_properties
from lakehouse.decisions import read_decisions, shaping_decisions
from lakehouse.errors import InputError
from lakehouse.refs import parse_identifier
from trainer.checkpoint_paths import COMPLETE, latest_checkpoint

# What the orchestration writes in a run folder: {"factory", "run", "decisions": [decision ids], …}.
RUN_RECORD = "factory.json"

# Operations after which older snapshots no longer contribute rows to the table's content.
_REPLACING = {Operation.OVERWRITE, Operation.REPLACE, Operation.DELETE}


def pipeline_runs(catalog: Catalog, table: str, snapshot_id: int, _memo: dict | None = None) -> list[dict[str, Any]]:
    """The runs whose commits make up ``table@snapshot_id``, newest first, each with its inputs' runs."""
    memo = {} if _memo is None else _memo
    key = (table, snapshot_id)
    if key in memo:
        return memo[key]
    memo[key] = []  # guards against a cycle in malformed summaries
    iceberg_table = catalog.load_table(parse_identifier(table))
    snapshot = iceberg_table.snapshot_by_id(snapshot_id)
    runs = []
    for ancestor in ancestors_of(snapshot, iceberg_table.metadata):
        props = summary_properties(ancestor)
        if "factory.run-id" in props:
            where = f"{table}@{ancestor.snapshot_id}'s"  # a summary another tool wrote is refused naming it
            inputs = []
            for entry in recorded_inputs(props.get("factory.inputs"), f"{where} factory.inputs"):
                if "table" in entry:
                    entry = {**entry, "runs": pipeline_runs(catalog, entry["table"], int(entry["snapshot_id"]), memo)}
                inputs.append(entry)
            runs.append(
                {
                    "table": table,
                    "snapshot_id": ancestor.snapshot_id,
                    "committed_at": datetime.fromtimestamp(ancestor.timestamp_ms / 1000, UTC).isoformat(
                        timespec="seconds"
                    ),
                    "job": props.get("factory.job"),
                    "run_id": props.get("factory.run-id"),
                    "code_version": props.get("factory.code-version"),
                    "params": recorded_params(props.get("factory.params"), f"{where} factory.params"),
                    "stats": snapshot_stats(ancestor),
                    "inputs": inputs,
                }
            )
        if ancestor.summary is not None and ancestor.summary.operation in _REPLACING:
            break
    memo[key] = runs
    return runs


def format_lineage(lineage: dict[str, Any]) -> str:
    """The lineage of a checkpoint as an indented tree for people."""
    lines = [
        f"checkpoint {lineage.get('checkpoint', '?')}  step {lineage.get('step')}  code {lineage.get('code_version')}"
    ]
    rl = lineage.get("rl")
    if rl:  # an RL checkpoint (rl/learner.py): what follows its own part is its starting checkpoint's
        start, tasks = rl["start"], rl["tasks"]
        lines.append(
            f"reinforcement learning from checkpoint {start['checkpoint']} (step {start['step']}), "
            f"tasks {tasks.get('source')}: {tasks.get('tasks')} trained on, {tasks.get('heldout')} held out"
        )
        lines.extend(_format_rl(rl))
        lines.append("pre-trained, as its starting checkpoint says:")
    lines += [
        f"manifest {lineage['manifest'].get('path', '')}  fingerprint {lineage['manifest'].get('fingerprint', '?')}",
        f"tokenizer {lineage['tokenizer']['path']}  sha256 {lineage['tokenizer']['sha256'][:16]}…",
        "loader position: next global batch {next_global_batch}, {sequences} sequences, {tokens} tokens".format(
            **lineage["loader_position"]
        ),
    ]
    provenance = lineage["manifest"].get("provenance")
    if provenance:
        lines.append(f"weights from {_format_provenance(provenance)}")
    tracked = lineage.get("mlflow")
    if tracked:
        lines.append(
            f"mlflow run {tracked['run_id']}  experiment {tracked['experiment']}  at {tracked['tracking_uri']}"
        )
    lines.append("data:")
    shown: set[tuple[str, int]] = set()
    for component in lineage.get("components", []):
        lines.append(
            f"  {component['name']}  weight {component['weight']}  {component['table']}@{component['snapshot_id']}"
        )
        for run in component.get("runs", []):
            if (run["table"], run["snapshot_id"]) not in shown:
                shown.add((run["table"], run["snapshot_id"]))
                _format_run(run, "    ", lines, shown)
    if lineage.get("lineage_error"):
        lines.append(f"  (pipeline runs unavailable: {lineage['lineage_error']})")
    return "\n".join(lines)


def _format_rl(rl: dict[str, Any]) -> list[str]:
    """The RL run's task snapshot (and the raw snapshots it was built from), its rollouts and config."""
    lines = []
    tasks = rl["tasks"]
    if tasks.get("table"):
        built = ", ".join(f"{i['table']}@{i['snapshot_id']}" for i in json.loads(tasks.get("inputs") or "[]"))
        lines.append(
            f"  tasks {tasks['table']}@{tasks['snapshot_id']} (built by {tasks.get('build_run_id')} from {built})"
        )
    if rl.get("rollouts"):
        found = rl["rollouts"]
        lines.append(f"  rollouts {found['table']}@{found['snapshot_id']} (run {found['run_id']})")
    config = rl.get("config") or {}
    if config:
        rollout, grpo = config.get("rollout", {}), config.get("grpo", {})
        lines.append(
            f"  config: seed {config['run']['seed']}, {config['train']['steps']} steps of "
            f"{rollout.get('tasks_per_step')} tasks x {rollout.get('group_size')} samples, "
            f"kl_beta {grpo.get('kl_beta')}, lr {config['optim']['lr']} (all of it in lineage.json)"
        )
    return lines


def _format_provenance(provenance: dict[str, Any]) -> str:
    """One line on how a manifest's weights were chosen (``factory mix search`` records it)."""
    fit = provenance.get("fit", {})
    parts = [f"{provenance.get('method', 'a program')} {provenance.get('sweep_id', '')}".strip()]
    if provenance.get("trials"):
        parts.append(f"{len(provenance['trials'])} proxy trials")
    if fit:
        parts.append(f"fit {fit.get('model')} (cross-validated Spearman {fit.get('cv_spearman', float('nan')):.3f})")
    if provenance.get("target"):
        parts.append("target " + ", ".join(f"{k} {v:g}" for k, v in provenance["target"].items()))
    return "; ".join(parts)


def _format_run(run: dict[str, Any], indent: str, lines: list[str], shown: set[tuple[str, int]]) -> None:
    """One run and, once each, the runs behind its inputs: a run reached again (an append table's
    earlier runs under each later snapshot, a dedup's ``--against``, its own earlier output) is
    counted, not shown again, so the tree grows with the runs rather than with their square."""
    stats = ", ".join(f"{k}={v}" for k, v in run["stats"].items() if "." not in k)
    lines.append(
        f"{indent}└─ {run['job']} run {run['run_id']} → {run['table']}@{run['snapshot_id']} ({run['committed_at']})"
    )
    if stats:
        lines.append(f"{indent}     stats {stats}")
    for entry in run["inputs"]:
        if "table" in entry:
            lines.append(f"{indent}     from {entry['table']}@{entry['snapshot_id']}")
            runs = entry.get("runs", [])
            new = [r for r in runs if (r["table"], r["snapshot_id"]) not in shown]
            for upstream in new:
                shown.add((upstream["table"], upstream["snapshot_id"]))
                _format_run(upstream, indent + "       ", lines, shown)
            if len(runs) > len(new):
                lines.append(f"{indent}       … and {len(runs) - len(new)} run(s) shown above")
        else:
            lines.append(f"{indent}     from {entry.get('uri', entry)}")


# What the readers of a lineage take from it without looking: section → the keys it must hold.
# ``config`` only where a reader needs it: eval and export build the model from it (``with_config``),
# and a resume compares with it (``trainer.resume`` refuses a lineage without it, saying what to do);
# lineage and the UI do without.
_SECTIONS = {
    "manifest": ("path", "fingerprint"),
    "tokenizer": ("path", "sha256"),
    "loader_position": ("next_global_batch", "sequences", "tokens"),
}


def read_lineage(path: str | Path, *, with_config: bool = False, to_print: bool = False) -> dict[str, Any]:
    """The lineage of a checkpoint directory, or of a run directory's newest complete checkpoint;
    ``InputError`` naming what is missing if the file is not one. ``to_print``: also the pipeline
    runs' tree that ``format_lineage`` prints (export, eval and resume read none of it, and
    copy it as it is)."""
    return lineage_in(checkpoint_dir(path) / "lineage.json", with_config=with_config, to_print=to_print)


def lineage_in(file: Path, *, with_config: bool = False, to_print: bool = False) -> dict[str, Any]:
    """The lineage ``file`` holds, checked as ``read_lineage`` checks it, for a reader that found the
    checkpoint folder itself (the UI, from its own listing of a run's checkpoints)."""
    try:
        lineage = json.loads(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(f"cannot read {file} ({exc.strerror}): a checkpoint's lineage should be there") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"{file} is not the JSON a checkpoint's lineage is ({exc}): the folder is damaged") from None
    if not isinstance(lineage, dict) or not isinstance(lineage.get("manifest"), dict):
        raise InputError(f"{file} is not a checkpoint's lineage (no manifest in it): the folder is damaged")
    missing = []
    for name, keys in _SECTIONS.items():
        section = lineage.get(name)
        # An object first: "path" is "in" the string "path sha256" too.
        missing += [f"{name}.{key}" for key in keys if key not in section] if isinstance(section, dict) else [name]
    tokenizer = lineage.get("tokenizer")
    if isinstance(tokenizer, dict) and not isinstance(tokenizer.get("sha256", ""), str):
        missing.append("tokenizer.sha256 (a string)")  # printed cut short, and compared with a file's hash
    if not isinstance(lineage.get("step"), int):
        missing.append("step")
    if with_config and not isinstance(lineage.get("config"), dict):
        missing.append("config")
    if to_print:
        missing += _missing_in_data(lineage.get("components", []))
    if missing:
        raise InputError(f"{file} lacks {', '.join(missing)} of a checkpoint's lineage: the folder is damaged")
    return lineage


# What ``format_lineage`` reads of each component, each pipeline run and each run's table input.
_COMPONENT = ("name", "weight", "table", "snapshot_id")
_RUN = ("table", "snapshot_id", "job", "run_id", "committed_at")
_TABLE_INPUT = ("table", "snapshot_id")


def _missing_in_data(components: Any) -> list[str]:
    """Where the ``components`` tree (components → runs → inputs → runs …) lacks what
    ``format_lineage`` reads, as paths like ``components[0].runs[1].table``: a crafted or damaged
    file is refused naming the key rather than failing deep in the printing."""
    if not isinstance(components, list):
        return ["components (a list)"]
    missing = []
    for i, component in enumerate(components):
        where = f"components[{i}]"
        missing += missing_keys(component, _COMPONENT, where)
        if isinstance(component, dict):
            missing += _missing_in_runs(component.get("runs", []), f"{where}.runs")
    return missing


def _missing_in_runs(runs: Any, where: str) -> list[str]:
    if not isinstance(runs, list):
        return [f"{where} (a list)"]
    missing = []
    for i, run in enumerate(runs):
        at = f"{where}[{i}]"
        missing += missing_keys(run, _RUN, at)
        if not isinstance(run, dict):
            continue
        if not isinstance(run.get("stats"), dict):
            missing.append(f"{at}.stats (an object)")
        inputs = run.get("inputs")
        if not isinstance(inputs, list) or not all(isinstance(entry, dict) for entry in inputs):
            missing.append(f"{at}.inputs (a list of objects)")
            continue
        for k, entry in enumerate(inputs):
            if "table" in entry:
                missing += missing_keys(entry, _TABLE_INPUT, f"{at}.inputs[{k}]")
                missing += _missing_in_runs(entry.get("runs", []), f"{at}.inputs[{k}].runs")
    return missing


# Keys whose readers need more than text: a table is quoted into a link, a snapshot id made an int
# (``checkpoint_decisions``) and a set's key. The writers record both so (``pipeline_runs``, manifests).
_KINDS = {"table": (str, "a string"), "snapshot_id": (int, "an integer")}


def missing_keys(
    value: Any, keys: tuple[str, ...], where: str, kinds: dict[str, tuple[type, str]] | None = None
) -> list[str]:
    """The paths of ``keys`` that ``value`` (found at ``where``) lacks, or holds as another kind than
    ``kinds`` (default: a table a string, a snapshot id an integer) says; ``where`` if it is no object."""
    if not isinstance(value, dict):
        return [f"{where} (an object)"]
    kinds = _KINDS if kinds is None else kinds
    missing = []
    for key in keys:
        if key not in value:
            missing.append(f"{where}.{key}")
        elif key in kinds and not isinstance(value[key], kinds[key][0]):
            missing.append(f"{where}.{key} ({kinds[key][1]})")
    return missing


def checkpoint_dir(path: str | Path) -> Path:
    """The complete checkpoint ``path`` names: itself, or a run directory's newest; ``InputError`` if none."""
    path = Path(path)
    if not (path / "lineage.json").is_file() and (path / "checkpoints").is_dir():
        latest = latest_checkpoint(path)
        if latest is None:
            raise InputError(f"{path} has no complete checkpoint yet")
        path = latest[1]
    if not (path / "lineage.json").is_file():
        raise InputError(
            f"{path} is not a checkpoint (no lineage.json); give a checkpoints/step-N folder or a run folder"
        )
    if not (path / COMPLETE).is_file():
        raise InputError(f"{path} is an incomplete checkpoint (no {COMPLETE} marker): a save was interrupted")
    return path


def resolve_checkpoint(path: str | Path) -> Path:
    """A complete ``checkpoints/step-N`` folder, absolute: the one given, or a run folder's newest."""
    return checkpoint_dir(Path(path).resolve())


def checkpoint_decisions(
    catalog: Catalog | None, lineage: dict[str, Any], checkpoint: Path
) -> tuple[list[dict[str, Any]], list[str]]:
    """The decisions that shaped the checkpoint's data, oldest first, and the decision ids its run
    folder's ``factory.json`` names that ``catalog`` does not hold (``catalog`` None: there is none).

    Shaping: the gates that promoted one of the snapshots it pinned and the mixture decisions that
    made its manifest (``lakehouse.decisions.shaping_decisions``), and every decision the
    orchestration listed for its run (the adopted ablations among them)."""
    listed = run_decision_ids(checkpoint)
    recorded = [] if catalog is None else read_decisions(catalog)
    snapshots = {(c["table"], int(c["snapshot_id"])) for c in lineage.get("components", [])}
    fingerprint = lineage.get("manifest", {}).get("fingerprint")
    wanted = {r["decision_id"] for r in shaping_decisions(recorded, fingerprint, snapshots)} | set(listed)
    rows = [r for r in recorded if r["decision_id"] in wanted]
    found = {r["decision_id"] for r in rows}
    return rows, [d for d in dict.fromkeys(listed) if d not in found]


def run_decision_ids(checkpoint: Path) -> list[str]:
    """The decision ids the ``factory.json`` of the checkpoint's run folder (a ``checkpoints/step-N``
    folder's ``../..``) lists; none without one."""
    record_path = checkpoint.parent.parent / RUN_RECORD
    try:
        record = json.loads(record_path.read_text())
    except FileNotFoundError:
        return []  # a run started by hand, not by the orchestration
    except ValueError as exc:
        raise InputError(f"{record_path} is not JSON ({exc}); it should name the run's decisions") from None
    ids = record.get("decisions", []) if isinstance(record, dict) else None
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise InputError(f'{record_path}: "decisions" should be a list of decision ids, got {ids!r}')
    return ids
