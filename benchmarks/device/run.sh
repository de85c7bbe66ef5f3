#!/usr/bin/env bash
# On the lent GPU machine (the `device` tool), after benchmarks/device/prepare.sh here: unpacks the
# carried packages and the check's data made here (benchmarks/device/data.sh: the tables the
# factory's commands make, which need Spark, which that machine lacks) and runs one check, its
# output also under $OUT. Carry the packages and that check's data, e.g.
# [".device/site.tar.xz", ".device/data-trainer.tar.xz"] (all three data archives exceed 64 MiB).
#
#     bash benchmarks/device/run.sh trainer   # issue 19 point 7: the 1B config on one H200 (< 8 min)
#     bash benchmarks/device/run.sh loader    # the loader benchmark on the machine's 16 cores, one copy
#                                             # of the library (data-loader.tar.xz)
#     bash benchmarks/device/run.sh vllm      # issue 31 point 2: vLLM serves `factory export`'s folder, greedy
#                                             # completions against ours (skips, exit 0, where vllm is missing)
#     bash benchmarks/device/run.sh trainer --config configs/demo-train.toml --steps 4   # other arguments
#
# One check a call: each fits the tool's 10 minutes a command, and a session has 15 minutes of
# device time in all, the machine's start included.
set -uo pipefail
cd "$(dirname "$0")/../.."
check=${1:?say which: trainer, loader or vllm}
shift
out=${OUT:-/tmp/device-out}
archive=${SITE_ARCHIVE:-.device/site.tar.xz}
mkdir -p "$out" /tmp/device-site
if [ ! -d /tmp/device-site/site ]; then
  tar -C /tmp/device-site -xJf "$archive" || { echo "cannot unpack $archive: run benchmarks/device/prepare.sh here and carry it" >&2; exit 2; }
fi
data=.device/data-$check.tar.xz
if [ "$check" != vllm ] || [ -f "$data" ]; then  # the vllm check makes nothing when it has a --checkpoint
  if [ ! -d "/tmp/device-data/$check" ]; then
    # Unpacked where it was made: its manifests name their files by absolute path.
    tar -C / -xJf "$data" || { echo "cannot unpack $data: run benchmarks/device/data.sh $check here and carry it" >&2; exit 2; }
  fi
fi
export PYTHONPATH=/tmp/device-site/site:$PWD PYTHONUNBUFFERED=1
PYTHON=${PYTHON:-python3}
$PYTHON - <<'PY' 2>&1 | tee "$out/environment.txt"
import os, sys
import pyarrow, pyiceberg, ray, tokenizers, torch
print(f"python {sys.version.split()[0]}, torch {torch.__version__}, ray {ray.__version__}, pyiceberg {pyiceberg.__version__}, "
      f"pyarrow {pyarrow.__version__}, tokenizers {tokenizers.__version__}, {os.cpu_count()} CPUs, "
      f"GPU: {torch.cuda.get_device_name() if torch.cuda.is_available() else 'none'}")
PY
case "$check" in
  trainer)
    [ $# -gt 0 ] || set -- --config configs/1b.toml --steps 30 --set data.global_batch_size=64
    timeout 540 $PYTHON benchmarks/trainer/run.py --data /tmp/device-data/trainer "$@" 2>&1 | tee "$out/trainer.txt" ;;
  loader)
    [ $# -gt 0 ] || set -- --home /tmp/device-data/loader --no-seek
    timeout 540 $PYTHON benchmarks/loader/run.py "$@" 2>&1 | tee "$out/loader.txt" ;;
  vllm)
    timeout 540 $PYTHON benchmarks/export/vllm_check.py --data /tmp/device-data/vllm "$@" 2>&1 | tee "$out/vllm.txt" ;;
  *)
    echo "unknown check $check: say trainer, loader or vllm" >&2; exit 2 ;;
esac
