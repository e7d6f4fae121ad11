#!/usr/bin/env bash
# Every dependency of fedpriv as a wheel in one folder, for the Dockerfile's
# WHEELHOUSE build argument (the image build then needs no network):
#
#   compose/wheelhouse.sh DIR [--torch-wheel FILE] [--constraints FILE] [--python PY]
#   docker build --build-arg WHEELHOUSE=DIR ...        (DIR inside the build context)
#
# Wheels for CPython 3.11 on x86_64 Linux, the image's platform, whatever the host.
# torch is the CPU build: --torch-wheel FILE (a local torch-2.13.0+cpu wheel), else
# from the CPU index (https://download.pytorch.org/whl/cpu); PyPI's build of the
# same version pulls CUDA. --constraints pins versions, e.g. `pip freeze` of the
# environment a container's model is compared with bit for bit.
set -euo pipefail

OUT= TORCH_WHEEL= CONSTRAINTS= PY=${PYTHON:-python3}
TORCH_INDEX=https://download.pytorch.org/whl/cpu
. "$(dirname "$0")/options.sh"
parse_options "$0" 2,12 "--torch-wheel=TORCH_WHEEL --constraints=CONSTRAINTS --python=PY" OUT -- "$@"
[ -n "$OUT" ] || { echo "usage: wheelhouse.sh DIR [--torch-wheel FILE] [--constraints FILE]" >&2; exit 2; }
ROOT=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$OUT"

# The image's platform, stated: a host of another Python or OS downloads the same.
# Debian bookworm's glibc is 2.36: every manylinux tag up to it (pip does not expand
# --platform manylinux_2_36 to the older ones itself).
TARGET=(--only-binary=:all: --python-version 3.11 --implementation cp --abi cp311
        --platform linux_x86_64 --platform manylinux1_x86_64 --platform manylinux2010_x86_64
        --platform manylinux2014_x86_64)
for minor in $(seq 5 36); do TARGET+=(--platform "manylinux_2_${minor}_x86_64"); done
PIP=("$PY" -m pip download --disable-pip-version-check --dest "$OUT")

if [ -n "$TORCH_WHEEL" ]; then
    cp "$TORCH_WHEEL" "$OUT/"
else
    "${PIP[@]}" "${TARGET[@]}" --no-deps --index-url "$TORCH_INDEX" torch==2.13.0
fi

REQ=$(mktemp)
trap 'rm -f "$REQ"' EXIT
"$PY" - "$ROOT/pyproject.toml" > "$REQ" <<'PYEOF'
import sys
import tomllib

with open(sys.argv[1], "rb") as f:
    d = tomllib.load(f)
print("\n".join(d["project"]["dependencies"] + d["build-system"]["requires"]))
PYEOF
# --find-links OUT: torch's CPU wheel, already there, satisfies torch==2.13.0.
"${PIP[@]}" "${TARGET[@]}" --find-links "$OUT" -r "$REQ" ${CONSTRAINTS:+-c "$CONSTRAINTS"}
echo "wheelhouse $OUT: $(ls "$OUT" | wc -l) wheels, $(du -sh "$OUT" | cut -f1)"
