"""Evals that give signal at every scale: the demo's model at steps 10, 20, 30 and 40, evaluated with
``heldout`` (loss and bits per byte per component), ``humaneval_bpb`` and ``humaneval`` (pass@1).

    PYTHONPATH=. .venv/bin/python benchmarks/evals/run.py --demo-home /tmp/demo-final --out /tmp/evals-bench
        [--limit N] [--workers N]

The demo keeps its last 2 checkpoints (``configs/demo-train.toml``: ``checkpoint.keep = 2``), so
this trains the demo's run again on the demo's manifest and tokenizer (read from ``--demo-home``,
which is not written to) with ``checkpoint.keep=4``, into ``--out/run`` (skipped when its 4
checkpoints are there): the same config, data and seed, so the same weights as the demo's at steps
30 and 40. Each checkpoint is then evaluated into a catalog of its own under ``--out`` (the
demo's catalog is never written), which makes running it again print the committed figures
without evaluating anything. It prints a Markdown table (step → figures), the seconds each suite
took, whether each measure fell at every step, and a JSON summary.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SUITES = ("heldout", "humaneval_bpb", "humaneval")


def train(demo_home: Path, out: Path) -> Path:
    """The demo's run again, keeping every checkpoint; its folder."""
    (resolved,) = (demo_home / "factories" / "demo" / "runs" / "demo").glob("*/config.resolved.json")
    data = json.loads(resolved.read_text())["data"]
    run_dir = out / "run"
    if len(list((run_dir / "checkpoints").glob("step-*/COMPLETE"))) >= 4:
        return run_dir
    command = [sys.executable, "-m", "factory_cli.main", "train", "--config", str(REPO / "configs" / "demo-train.toml")]
    command += ["--nproc", "2", "--set", f"data.manifest={json.dumps(data['manifest'])}"]
    command += [
        "--set",
        f"data.tokenizer={json.dumps(data['tokenizer'])}",
        "--set",
        f"run.dir={json.dumps(str(run_dir))}",
    ]
    command += ["--set", "checkpoint.keep=4"]
    env = {**os.environ, "FACTORY_HOME": str(out / "home"), "PYTHONPATH": str(REPO)}
    subprocess.run(command, cwd=REPO, env=env, check=True)
    return run_dir


def evaluate(run_dir: Path, out: Path, limit: int | None, workers: int | None) -> list[dict]:
    """Each checkpoint's figures, oldest first, and the seconds each suite took on it."""
    import torch

    from evals.registry import SuiteOptions
    from evals.results import checkpoint_results
    from evals.run import evaluate_checkpoint
    from lakehouse.catalog import embedded_catalog_properties

    torch.set_num_threads(1)  # as factory eval does: generation on a small model is fastest on one thread
    (out / "home" / "warehouse").mkdir(parents=True, exist_ok=True)
    from pyiceberg.catalog import load_catalog

    catalog = load_catalog("factory", **embedded_catalog_properties(out / "home"))
    options = SuiteOptions(limit=limit, workers=workers)
    rows = []
    checkpoints = sorted((run_dir / "checkpoints").glob("step-*"), key=lambda p: int(p.name[5:]))
    for checkpoint in checkpoints:
        seconds = {}
        for suite in SUITES:
            started = time.monotonic()
            (outcome,) = evaluate_checkpoint(catalog, checkpoint, [suite], options)
            seconds[suite] = None if outcome.already_committed else round(time.monotonic() - started, 1)
        figures = {
            f"{r['suite']}:{r['metric']}": r["value"] for r in checkpoint_results(catalog, str(checkpoint.resolve()))
        }
        rows.append({"step": int(checkpoint.name[5:]), "figures": figures, "seconds": seconds})
    return rows


COLUMNS = [
    ("humaneval bpb", "humaneval_bpb:bpb"),
    ("held-out bpb, code", "heldout:bpb/code"),
    ("held-out bpb, text", "heldout:bpb/text"),
    ("held-out loss, code", "heldout:loss/code"),
    ("held-out loss, text", "heldout:loss/text"),
    ("pass@1", "humaneval:pass@1"),
]


def table(rows: list[dict]) -> str:
    lines = ["| step | " + " | ".join(name for name, _ in COLUMNS) + " |"]
    lines.append("| ---: | " + " | ".join("---:" for _ in COLUMNS) + " |")
    for row in rows:
        cells = [f"{row['figures'][key]:.4f}" if key in row["figures"] else "-" for _, key in COLUMNS]
        lines.append(f"| {row['step']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def falling(rows: list[dict]) -> dict[str, bool]:
    """Whether each measure fell from each checkpoint to the next."""
    found = {}
    for name, key in COLUMNS:
        values = [row["figures"].get(key) for row in rows]
        if None in values:
            continue
        found[name] = all(b < a for a, b in itertools.pairwise(values))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--demo-home", type=Path, required=True, help="a factory home that ran `factory demo`")
    parser.add_argument("--out", type=Path, required=True, help="where the run and the eval catalog go")
    parser.add_argument("--limit", type=int, default=None, help="only the first N HumanEval problems (default all)")
    parser.add_argument("--workers", type=int, default=None, help="sandboxed programs at once (default: CPU count)")
    args = parser.parse_args()
    run_dir = train(args.demo_home.resolve(), args.out.resolve())
    rows = evaluate(run_dir, args.out.resolve(), args.limit, args.workers)
    print(table(rows))
    print()
    for row in rows:
        print(f"step {row['step']}: seconds per suite {row['seconds']}")
    fell = falling(rows)
    print("fell at every step: " + ", ".join(f"{name} {'yes' if yes else 'no'}" for name, yes in fell.items()))
    print(json.dumps({"rows": rows, "fell_at_every_step": fell}, indent=2, sort_keys=True))


if __name__ == "__main__":
    main()
