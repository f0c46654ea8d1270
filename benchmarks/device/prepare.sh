#!/usr/bin/env bash
# Here, before a lent GPU machine is used: download the wheels that benchmarks/gpu_check.sh needs there and
# the machine's image lacks (benchmarks/device/wheels.txt), for its Python (CPython 3.12, x86-64 Linux),
# into build/device-wheels (ignored by git: the device tool's `run` carries it, see benchmarks/gpu_check.sh).
# Needs a pip that reaches a registry; the device reaches none.
#
#     benchmarks/device/prepare.sh [FOLDER]
#
# First it checks wheels.txt against the code, where the project's .venv is (benchmarks/device/imports.py:
# every third-party module the check imports, and what those distributions require, is in the device image
# or in the list). The folder ends up holding exactly the listed wheels, one version of each.
set -eu
cd "$(dirname "$0")/../.."
DEST=${1:-build/device-wheels}
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
LIST=benchmarks/device/wheels.txt

if "$PY" -c "import packaging, nbformat" 2>/dev/null; then
    "$PY" -m benchmarks.device.imports --check
else
    echo "($PY is not the project's venv: wheels.txt is not checked against the code)"
fi

# Tags the device's interpreter accepts: CPython 3.12 (cp312, abi3, pure), glibc 2.39 there; 2.36 and older
# keep the wheels installable on these machines too.
PLATFORMS=""
for p in manylinux1 manylinux2010 manylinux2014 manylinux_2_17 manylinux_2_24 manylinux_2_26 manylinux_2_27 \
         manylinux_2_28 manylinux_2_31 manylinux_2_34 manylinux_2_35 manylinux_2_36; do
    PLATFORMS="$PLATFORMS --platform ${p}_x86_64"
done
mapfile -t WANT < <(sed 's/#.*//; s/[[:space:]]//g; /^$/d' "$LIST")

rm -rf "$DEST.new"
# shellcheck disable=SC2086
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    $PLATFORMS -d "$DEST.new" "${WANT[@]}" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
got=$(ls "$DEST.new"/*.whl | wc -l)
if [ "$got" -ne "${#WANT[@]}" ]; then
    echo "expected ${#WANT[@]} wheels, got $got in $DEST.new"; exit 1
fi
rm -rf "$DEST"
mv "$DEST.new" "$DEST"
echo "$got wheels for CPython 3.12 in $DEST ($(du -sh "$DEST" | cut -f1)); carry it: carry=[\"$DEST\"]"
