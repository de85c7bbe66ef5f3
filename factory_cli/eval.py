"""``factory eval CHECKPOINT``: run eval suites on a checkpoint and append the metrics to ``evals.results``,
every sample behind them to ``evals.samples``."""

from __future__ import annotations

import argparse
import math

from factory_cli.arguments import add_run_id_argument


def add_arguments(parser: argparse.ArgumentParser, _name: str = "eval") -> None:
    from evals.registry import SUITES

    parser.add_argument(
        "checkpoint", metavar="CHECKPOINT", help="a checkpoints/step-N folder, or a run folder (its newest)"
    )
    parser.add_argument(
        "--suite",
        nargs="+",
        action="extend",
        choices=list(SUITES),
        metavar="NAME",
        help=f"suites to run (default: heldout); known: {', '.join(SUITES)}",
    )
    parser.add_argument(
        "--samples", type=_positive, default=1, help="completions per problem: pass@k for k <= N (default 1, greedy)"
    )
    parser.add_argument(
        "--limit", type=_positive, default=None, help="humaneval, humaneval_bpb: only the first N problems"
    )
    parser.add_argument(
        "--max-new-tokens", type=_positive, default=128, help="humaneval: longest completion (default 128)"
    )
    parser.add_argument(
        "--temperature",
        type=_temperature,
        default=0.8,
        help="humaneval sampling temperature when --samples > 1 (default 0.8; 0 is greedy)",
    )
    parser.add_argument(
        "--timeout", type=_seconds, default=5.0, help="humaneval: wall-clock seconds per program (default 5)"
    )
    parser.add_argument("--workers", type=_positive, default=None, help="programs run at once (default: CPU count)")
    parser.add_argument(
        "--threads", type=_positive, default=None, help="torch threads on CPU (default: $OMP_NUM_THREADS, else 1)"
    )
    add_run_id_argument(parser)


def _temperature(text: str) -> float:
    return _bounded(text, 0, "a number >= 0 (0 is greedy)")


def _seconds(text: str) -> float:
    return _bounded(text, math.ulp(0), "a number of seconds > 0")


def _bounded(text: str, least: float, rule: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not least <= value < math.inf:  # NaN fails both
        raise argparse.ArgumentTypeError(f"must be {rule}, got {text!r}")
    return value


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def run(args: argparse.Namespace) -> int:
    from evals.checkpoint_model import resolve_checkpoint
    from evals.registry import SuiteOptions
    from evals.results import checkpoint_results
    from evals.run import evaluate_checkpoint
    from evals.samples import eval_runs, format_tally
    from lakehouse.catalog import load_catalog

    _set_threads(args.threads)
    catalog = load_catalog(args.catalog)
    options = SuiteOptions(
        samples=args.samples,
        limit=args.limit,
        max_new_tokens=args.max_new_tokens,
        temperature=args.temperature,
        timeout_s=args.timeout,
        workers=args.workers,
    )
    outcomes = evaluate_checkpoint(catalog, args.checkpoint, args.suite or ["heldout"], options, args.run_id)
    checkpoint = str(resolve_checkpoint(args.checkpoint))
    rows = checkpoint_results(catalog, checkpoint) if any(o.already_committed for o in outcomes) else []
    samples = {found["eval_run_id"]: found for found in eval_runs(catalog, checkpoint)}
    for outcome in outcomes:
        state = "already committed" if outcome.already_committed else "committed"
        print(f"{outcome.suite}: eval run {outcome.eval_run_id} {state} as evals.results@{outcome.snapshot_id}")
        metrics = [(m.name, m.value, m.samples) for m in outcome.metrics]
        if not metrics:
            metrics = [(r["metric"], r["value"], r["samples"]) for r in rows if r["eval_run_id"] == outcome.eval_run_id]
        for name, value, count in metrics:
            print(f"  {name:<24} {value:.6g}  (samples {count})")
        found = samples.get(outcome.eval_run_id)
        if found and found["samples_snapshot"] is not None:
            print(f"  evals.samples@{found['samples_snapshot']}: {format_tally(found)}")
    return 0


def _set_threads(threads: int | None) -> None:
    """One thread unless told otherwise: token-by-token generation on a small model is dominated by
    thread start-up and waits (measured on the test's tiny model: 0.8-1.2 s per completion with
    1 thread against 17-24 s with 2, on a busy 2-core machine)."""
    import os

    import torch

    torch.set_num_threads(threads or int(os.environ.get("OMP_NUM_THREADS") or 1))
