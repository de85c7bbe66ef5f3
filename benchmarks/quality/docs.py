"""The `docs` filter config against `text` on a hand-labelled sample of documentation.

    PYTHONPATH=. .venv/bin/python benchmarks/quality/docs.py [--all]

``docs_labels.tsv``: 50 documents drawn at random (seed 19) from the demo's documentation corpus
(/usr/share/doc: copyright, README, *.txt, *.md), each read and judged: 1 = useful technical prose
(READMEs, API and build docs, guides, release notes of more than a few items); 0 = licence and
copyright boilerplate, release-note stubs of a line or three. Prints each config's kept fraction,
precision and recall of "kept" against the labels; --all also prints the kept fraction over the
whole corpus.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from quality.base import Doc
from quality.chain import FilterChain
from quality.config import load_config

LABELS = Path(__file__).with_name("docs_labels.tsv")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--all", action="store_true", help="also the kept fraction of all of /usr/share/doc")
    args = parser.parse_args()
    rows = [line.split("\t") for line in LABELS.read_text().splitlines() if not line.startswith("#")]
    rows = [(path, int(label)) for path, label in rows if Path(path).is_file()]
    print(f"{len(rows)} labelled documents present, {sum(label for _, label in rows)} to keep")
    for name in ("text", "docs"):
        chain = FilterChain(load_config(name))
        kept = [chain.apply(Doc(p, Path(p).read_text(encoding="utf-8"), "text", "en", p)).keep for p, _ in rows]
        tp = sum(k and label for k, (_, label) in zip(kept, rows, strict=True))
        precision = tp / sum(kept) if any(kept) else 0.0
        recall = tp / sum(label for _, label in rows)
        print(f"{name:5} kept {sum(kept)}/{len(rows)}  precision {precision:.2f}  recall {recall:.2f}")
        if args.all:
            from benchmarks.quality.run import collect

            docs = collect("text", 1 << 40)
            n = sum(chain.apply(Doc(d["id"], d["text"], "text", "en", d["path"])).keep for d in docs)
            print(f"      whole corpus: kept {n}/{len(docs)} ({n / len(docs):.1%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
