#!/usr/bin/env bash
# Build Horovod 0.28.1 (its last release) against the installed torch, with PyTorch and
# Gloo, once; cache the wheel outside the checkout keyed by Python and torch version.
#
# Horovod 0.28.1 sets CMAKE_CXX_STANDARD 14, but torch >= 2.1 headers need C++17, and
# gloo's cmake_minimum_required is too old for cmake >= 4; we patch the former and pin
# cmake<4 in requirements.txt. HOROVOD_WITH_PYTORCH=1 makes the build fail loudly
# instead of silently skipping the torch extension.
#
# Usage: scripts/build_horovod.sh <python>   (installs the wheel into that interpreter)
set -euo pipefail

PY="${1:?usage: build_horovod.sh <python>}"
HOROVOD_VERSION=0.28.1
py_tag=$("$PY" -c 'import sys; print(f"py{sys.version_info[0]}{sys.version_info[1]}")')
torch_version=$("$PY" -c 'import torch; print(torch.__version__.replace("+", "_"))')
cache_root="${MLSPARK_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/airflow-spark-ml/wheels}"
cache_dir="$cache_root/horovod-${HOROVOD_VERSION}-${py_tag}-torch${torch_version}"

# One build at a time per cache (two set-ups at once, say a checkout's and a fresh clone's):
# the second waits for the first's wheel instead of reading it half-copied.
mkdir -p "$cache_dir"
exec 9>"$cache_dir/.build.lock"
flock 9
wheel=$(ls "$cache_dir"/horovod-${HOROVOD_VERSION}-*.whl 2>/dev/null | head -n1 || true)
if [[ -z "$wheel" ]]; then
    echo "[build_horovod] no cached wheel in $cache_dir: building Horovod ${HOROVOD_VERSION} (about 4-5 min on 2 cores)"
    start=$(date +%s)
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    "$PY" -m pip download --quiet --no-deps --no-binary :all: "horovod==${HOROVOD_VERSION}" -d "$work"
    tar -xzf "$work/horovod-${HOROVOD_VERSION}.tar.gz" -C "$work"
    src="$work/horovod-${HOROVOD_VERSION}"
    sed -i 's/set(CMAKE_CXX_STANDARD 14)/set(CMAKE_CXX_STANDARD 17)/' \
        "$src/CMakeLists.txt" "$src/horovod/torch/CMakeLists.txt"
    grep -q 'CMAKE_CXX_STANDARD 17' "$src/horovod/torch/CMakeLists.txt"
    # The venv's bin (cmake<4 from requirements.txt) must come first on PATH.
    PATH="$(dirname "$PY"):$PATH" \
    HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 \
    HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1 \
    MAKEFLAGS="-j$(nproc)" \
        "$PY" -m pip wheel --no-build-isolation --no-deps -w "$work/dist" "$src"
    built=$(ls "$work"/dist/horovod-*.whl | head -n1)
    cp "$built" "$cache_dir/.partial"  # then renamed: a reader never sees a half-written wheel
    mv "$cache_dir/.partial" "$cache_dir/$(basename "$built")"
    wheel=$(ls "$cache_dir"/horovod-${HOROVOD_VERSION}-*.whl | head -n1)
    echo "[build_horovod] built $wheel in $(( $(date +%s) - start )) s"
else
    echo "[build_horovod] reusing cached wheel $wheel"
fi
flock -u 9

"$PY" -m pip install --quiet --no-deps --force-reinstall "$wheel"
check=$("$(dirname "$PY")/horovodrun" --check-build)
echo "$check"
grep -q '\[X\] PyTorch' <<<"$check" || { echo "[build_horovod] Horovod lacks PyTorch support" >&2; exit 1; }
grep -q '\[X\] Gloo' <<<"$check" || { echo "[build_horovod] Horovod lacks Gloo support" >&2; exit 1; }
