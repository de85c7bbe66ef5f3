#!/usr/bin/env bash
# Makes, here, the data the lent GPU machine's trainer and vllm checks train on, into
# .device/data.tar.xz (carried with .device; run.sh unpacks it and passes its --data).
#
#     bash benchmarks/device/data.sh     # here (prepare.sh runs it); 2-3 minutes on 2 cores
#
# Why here: the benchmarks make their data as a user does, with `factory ingest`, `factory filter`,
# `factory tokenizer train` and `factory mix pin` (benchmarks/trainer/run.py: prepare_data), and
# those jobs run on Spark, which that machine lacks. Each check's default sizes are made, so the
# GPU trains on the same table as a run here. A manifest names its files by absolute path: the
# data is made under /tmp/device-data, and run.sh unpacks it to the same place there.
set -euo pipefail
cd "$(dirname "$0")/../.."
DEST=${DEST:-.device}
DATA=/tmp/device-data
PYTHON=${PYTHON:-.venv/bin/python}
rm -rf "$DATA" "$DEST/data.tar.xz"
mkdir -p "$DEST"
PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} $PYTHON - "$DATA" <<'PY'
import sys
from pathlib import Path

from benchmarks.export import vllm_check
from benchmarks.trainer import run as trainer

data = Path(sys.argv[1])
trainer.prepare_data(data / "trainer", trainer.DEFAULT_MB, trainer.DEFAULT_VOCAB)
trainer.prepare_data(data / "vllm", vllm_check.DEFAULT_MB, vllm_check.DEFAULT_VOCAB)
PY
tar -C / -cf - "${DATA#/}" | xz -T0 -6 > "$DEST/data.tar.xz"
size=$(stat -c %s "$DEST/data.tar.xz")
echo "$DEST/data.tar.xz: $((size / 1048576)) MiB (the working tree, site.tar.xz and this must stay under 64 MiB)" >&2
