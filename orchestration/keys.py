"""The graph's asset keys, in one place: every module that makes an asset or a dependency on one
names it through these."""

import dagster as dg

TOKENIZER = dg.AssetKey(["tokenizer"])


def step_key(source: str, step: str) -> dg.AssetKey:
    """``<source>/<step>``: raw, dedup, filtered, decontaminated, production."""
    return dg.AssetKey([source, step])


def production_key(source: str) -> dg.AssetKey:
    return step_key(source, "production")


def mixture_key(name: str) -> dg.AssetKey:
    return dg.AssetKey(["mixture", name])


def run_key(name: str) -> dg.AssetKey:
    return dg.AssetKey(["run", name])


def checkpoints_key(name: str) -> dg.AssetKey:
    return dg.AssetKey(["checkpoints", name])


def evals_key(name: str) -> dg.AssetKey:
    return dg.AssetKey(["evals", name])


def experiment_key(name: str) -> dg.AssetKey:
    return dg.AssetKey(["experiment", name])
