#!/usr/bin/env bash
# Packs, into .device/site.tar.xz, the Python packages the lent GPU machine's image lacks, for its
# Python (3.12 by default; PY=3.11 builds the same for this machine, to try the recipe here); then
# makes each check's data, .device/data-<check>.tar.xz (benchmarks/device/data.sh).
#
#     bash benchmarks/device/prepare.sh          # here, once per session that has a device machine
#     # then, with the `device` tool: carry [".device/site.tar.xz", ".device/data-trainer.tar.xz"],
#     # command "bash benchmarks/device/run.sh trainer"
#
# Why a script of our own: that machine reaches no package registry and takes at most 64 MiB of
# working tree, carried paths included. Its image holds torch, numpy, pyarrow and most small
# packages (as the device tool lists them); what it lacks is pyiceberg and Ray with what they
# import. Ray's wheel alone is 79 MB, so its Java jars, the dashboard's web client, RLlib, Serve
# and the LLM library, none of which the loader or the trainer import, are left out (29 MB
# compressed). Versions come from constraints.txt, as everywhere.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-3.12}
DEST=${DEST:-.device}
# What the trainer and loader benchmarks import (driver, Ray workers, reader actors) that the image
# lacks, found by listing sys.modules in each of those processes here; tokenizers is carried too,
# so that the stream is tokenized by the version the tests pin.
PACKAGES=(
  pyiceberg sqlalchemy pydantic pydantic-core annotated-types typing-inspection cachetools mmh3 pyroaring
  strictyaml ruamel.yaml pytz zstandard dill wcwidth
  ray jsonschema jsonschema-specifications referencing rpds-py jsonpointer rfc3339-validator starlette
  tokenizers
)
PIP=${PIP:-.venv/bin/python -m pip}
rm -rf "$DEST/wheels" "$DEST/site" "$DEST/site.tar.xz"
mkdir -p "$DEST/wheels" "$DEST/site"
platforms=()
for tag in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do
  platforms+=(--platform "$tag")
done
echo "downloading ${#PACKAGES[@]} packages for CPython $PY (constraints.txt)" >&2
$PIP download -q --no-deps --only-binary=:all: --python-version "$PY" --implementation cp "${platforms[@]}" \
  -c constraints.txt -d "$DEST/wheels" "${PACKAGES[@]}"
for wheel in "$DEST"/wheels/*.whl; do
  unzip -q -o "$wheel" -d "$DEST/site"  # unzip keeps the executable bits of Ray's daemons; zipfile does not
done
rm -rf "$DEST"/site/ray/{jars,rllib,serve,llm} "$DEST/site/ray/dashboard/client/build"
echo "compressing $(du -sh "$DEST/site" | cut -f1) of packages (about a minute)" >&2
tar -C "$DEST" -cf - site | xz -T0 -6 > "$DEST/site.tar.xz"
rm -rf "$DEST/wheels" "$DEST/site"
size=$(stat -c %s "$DEST/site.tar.xz")
echo "$DEST/site.tar.xz: $((size / 1048576)) MiB (the working tree and this must stay under 64 MiB)" >&2
bash benchmarks/device/data.sh
