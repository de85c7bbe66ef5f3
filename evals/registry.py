"""The eval suites by name: a lazy registry, so a new suite is one new module under ``evals/suites/``.

A suite module has ``DESCRIPTION``, ``params(options) -> dict`` (the options its results depend
on: they name and bind its eval run) and ``run(checkpoint, options) -> SuiteResult``: its metrics
(rows of ``evals.results``) and the samples behind them (rows of ``evals.samples``), if any.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from types import ModuleType

from lakehouse.errors import InputError

SUITES: dict[str, str] = {
    "heldout": "evals.suites.heldout",
    "humaneval": "evals.suites.humaneval",
    "humaneval_bpb": "evals.suites.humaneval_bpb",
}


@dataclass(frozen=True)
class SuiteOptions:
    """What ``factory eval`` passes every suite; each reads the options that concern it."""

    samples: int = 1  # completions per problem (humaneval: pass@k for k <= samples)
    limit: int | None = None  # humaneval: the first N problems
    max_new_tokens: int = 128  # humaneval: longest completion
    temperature: float = 0.8  # humaneval, when samples > 1 (one sample is greedy)
    timeout_s: float = 5.0  # humaneval: wall-clock limit per program
    workers: int | None = None  # humaneval: programs run at once (default: the CPU count)


@dataclass(frozen=True)
class Metric:
    name: str  # loss/<component>, pass@1, …
    value: float
    samples: int  # what the value averages over: tokens (heldout), completions per problem (humaneval)


def load_suite(name: str) -> ModuleType:
    module = SUITES.get(name)
    if module is None:
        raise InputError(f"unknown eval suite {name!r}; known suites: {', '.join(SUITES)}")
    return importlib.import_module(module)


@dataclass(frozen=True)
class Sample:
    """One completion a suite generated, or one text it scored: a row of ``evals.samples``
    (``lakehouse/schemas.py: EVAL_SAMPLES_SCHEMA``) less what the eval run adds."""

    task_id: str
    sample_index: int
    prompt: str
    completion: str  # as generated, after the stop strings; or the text scored
    seed: int  # with the prompt and the sampling parameters, ``generate`` reproduces the completion
    temperature: float = 0.0
    top_p: float = 1.0
    max_new_tokens: int = 0  # 0: nothing was generated
    test: str | None = None
    passed: bool | None = None  # None for a suite that scores rather than judges
    exit_reason: str | None = None  # the sandbox's (``evals/sandbox.py: EXIT_REASONS``)
    stdout: str | None = None
    stderr: str | None = None
    duration_s: float | None = None
    score: float | None = None


@dataclass(frozen=True)
class SuiteResult:
    metrics: list[Metric]
    samples: list[Sample] = field(default_factory=list)
