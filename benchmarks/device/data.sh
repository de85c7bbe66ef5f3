#!/usr/bin/env bash
# Makes, here, the data each check of the lent GPU machine reads, one archive a check:
# .device/data-trainer.tar.xz, data-vllm.tar.xz and data-loader.tar.xz. run.sh unpacks its check's.
#
#     bash benchmarks/device/data.sh                 # all three (prepare.sh runs it); 4-6 minutes on 2 cores
#     bash benchmarks/device/data.sh trainer         # one
#     # then carry [".device/site.tar.xz", ".device/data-trainer.tar.xz"]: with the working tree,
#     # site and one check's data fit the 64 MiB a call carries; all three do not
#
# Why here: the benchmarks make their data as a user does, with `factory ingest`, `factory filter`,
# `factory tokenizer train` and `factory mix pin` (benchmarks/user_path.py), and those jobs run on
# Spark, which that machine lacks. Each check's default sizes are made (the trainer's and the
# vllm check's --mb and --vocab, the loader's one copy of the library), so the GPU machine reads
# the same tables as a run here. A manifest names its files by absolute path: the data is made
# under /tmp/device-data/<check>, and run.sh unpacks it to the same place there.
set -euo pipefail
cd "$(dirname "$0")/../.."
DEST=${DEST:-.device}
DATA=/tmp/device-data
PYTHON=${PYTHON:-.venv/bin/python}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
[ $# -gt 0 ] || set -- trainer vllm loader
mkdir -p "$DEST"
for check in "$@"; do
  rm -rf "${DATA:?}/$check" "$DEST/data-$check.tar.xz"
  case "$check" in
    trainer|vllm)
      $PYTHON - "$DATA/$check" "$check" <<'PY'
import sys
from pathlib import Path

from benchmarks.export import vllm_check
from benchmarks.trainer import run as trainer

defaults = trainer if sys.argv[2] == "trainer" else vllm_check
trainer.prepare_data(Path(sys.argv[1]), defaults.DEFAULT_MB, defaults.DEFAULT_VOCAB)
PY
      ;;
    loader)
      # One copy of the library (the user's path is six: too large to carry); the JSON lines are in
      # the tables once ingested.
      $PYTHON benchmarks/loader/run.py --home "$DATA/loader" --copies 1 --prepare-only
      rm -rf "$DATA/loader/corpus" ;;
    *)
      echo "unknown check $check: say trainer, vllm or loader" >&2; exit 2 ;;
  esac
  tar -C / -cf - "${DATA#/}/$check" | xz -T0 -6 > "$DEST/data-$check.tar.xz"
  size=$(stat -c %s "$DEST/data-$check.tar.xz")
  echo "$DEST/data-$check.tar.xz: $((size / 1048576)) MiB" >&2
done
