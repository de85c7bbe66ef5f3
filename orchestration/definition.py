"""A factory definition (``factory.toml``) as the rest of the orchestration sees it: sources, their
refinement, the tokenizer, mixtures, runs, evals, experiments and policies, as dataclasses.
``definition_load.load_definition`` reads and validates a file into them (docs/factory.md
documents every key).

Relative paths (source paths, training configs, filter config files) are relative to the
definition's folder. ``${NAME}`` in a path is the environment variable ``NAME``;
``${FACTORY_HOME}`` is always set (the lakehouse folder the commands use).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lakehouse.catalog import factory_home


@dataclass(frozen=True)
class SourceInput:
    """One set of paths ingested with its own include and exclude patterns."""

    paths: tuple[str, ...]
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    key: str = field(default="", compare=False)  # the definition's key: sources.NAME or sources.NAME.inputs[N]


@dataclass(frozen=True)
class Source:
    """Where a source's raw records are and how they are refined: raw → dedup → filtered →
    decontaminated, each step optional but ingest."""

    name: str
    format: str
    inputs: tuple[SourceInput, ...]
    record_options: Mapping[str, Any] = field(default_factory=dict)  # ingest's --text-field, --id-field, …
    dedup: Mapping[str, Any] | None = field(default_factory=dict)  # None: no dedup step
    filter: str | None = None  # a shipped filter config name or a path
    decontaminate: tuple[str, ...] = ()  # eval sets
    ngram: int | None = None  # decontaminate's --ngram (None: the command's default)
    watch: float = 60.0  # seconds between the sensor's looks at the paths; 0: never looks

    def tables(self) -> list[tuple[str, str]]:
        """``(step, table)`` of each step of the chain, in order."""
        steps = [("raw", f"raw.{self.name}")]
        if self.dedup is not None:
            steps.append(("dedup", f"dedup.{self.name}"))
        if self.filter is not None:
            steps.append(("filtered", f"filtered.{self.name}"))
        if self.decontaminate:
            steps.append(("decontaminated", f"decontaminated.{self.name}"))
        return steps

    @property
    def final_table(self) -> str:
        """The table the chain ends in: its ``production`` tag is what training reads."""
        return self.tables()[-1][1]


@dataclass(frozen=True)
class Tokenizer:
    vocab_size: int = 16384
    sources: tuple[str, ...] = ()  # empty: every source
    max_bytes: int = 64 << 20
    min_frequency: int = 2


@dataclass(frozen=True)
class Heldout:
    """The held-out split: a fixed fraction, or enough for about ``documents`` documents."""

    fraction: float | None = None
    documents: int | None = None

    def fraction_for(self, records: int) -> float:
        """The fraction for a component of ``records`` documents: ``documents`` of them, at least 1 %
        and at most a quarter (every rank's evaluation shard needs documents of each component)."""
        if self.fraction is not None:
            return self.fraction
        return round(min(0.25, max(0.01, (self.documents or 20) / max(records, 1))), 4)


@dataclass(frozen=True)
class Mixture:
    name: str
    components: tuple[str, ...]  # source names, in the loader's order
    weights: Mapping[str, float] | None  # fixed weights; None when searched
    search: Mapping[str, Any] | None = None  # factory mix search's spec keys
    seed: int = 0
    heldout: Heldout = field(default_factory=Heldout)


@dataclass(frozen=True)
class Run:
    name: str
    config: str  # absolute path of the training config
    mixture: str
    nproc: int = 1
    set: tuple[str, ...] = ()


@dataclass(frozen=True)
class Eval:
    name: str
    suites: tuple[str, ...]
    runs: tuple[str, ...]
    cadence: str = "checkpoint"  # every complete checkpoint, or only the run's final one
    every: int = 0  # with cadence "checkpoint": only steps that are multiples of this (0: all)
    limit: int | None = None
    samples: int = 1


@dataclass(frozen=True)
class Experiment:
    """A declared ablation or sweep: its spec's keys, the run it takes its base config and data from."""

    name: str
    kind: str  # "ablation" or "sweep"
    run: str
    spec: Mapping[str, Any]


@dataclass(frozen=True)
class Gate:
    enabled: bool = False
    promote: str = "not-worse"  # promote unless worse beyond seed noise, or only when better beyond it
    seeds: int = 3
    alpha: float = 0.05
    config: str = ""  # the proxies' training config (absolute path)
    set: tuple[str, ...] = ()
    nproc: int = 1
    resources: Mapping[str, float] = field(default_factory=dict)
    target: Mapping[str, float] = field(default_factory=dict)  # default: the gated source's held-out loss
    heldout_documents: int = 20


@dataclass(frozen=True)
class Policies:
    refinement_gate: Gate = field(default_factory=Gate)
    mixture_redetermination: bool = False
    ablation_adoption: bool = False


@dataclass(frozen=True)
class FactoryDefinition:
    name: str
    path: Path
    sources: Mapping[str, Source]
    tokenizer: Tokenizer
    mixtures: Mapping[str, Mixture]
    runs: Mapping[str, Run]
    evals: Mapping[str, Eval]
    experiments: Mapping[str, Experiment]
    policies: Policies

    def folder(self) -> Path:
        """Where this factory keeps its files: tokenizer, manifests, training runs, gate specs."""
        return factory_home() / "factories" / self.name
