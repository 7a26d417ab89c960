#!/usr/bin/env bash
# Create or reuse the project environment (.venv): pinned packages, Horovod from its
# cached wheel (built once), and the spark_jobs archive shipped to Spark with --py-files.
# With --dev also the test tools, among them Azurite (the Azure Storage emulator, from npm),
# installed once per version outside the checkout.
# Idempotent: a second run only checks what is there (a few seconds).
#
# Usage: scripts/setup_env.sh [--dev]
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=.venv
PY="$VENV/bin/python"
reqs=(requirements.txt)
[[ "${1:-}" == "--dev" ]] && reqs=(requirements-dev.txt)

if [[ ! -x "$PY" ]]; then
    echo "[setup] creating $VENV"
    python3.11 -m venv "$VENV"
    "$PY" -m pip install --quiet --upgrade "pip==26.3"
fi

# Reinstall only when the requirement files changed since the last successful install.
stamp="$VENV/.requirements.sha256"
files_digest=$(cat requirements.txt requirements-dev.txt constraints.txt | sha256sum | cut -d' ' -f1)
digest=$files_digest-${reqs[0]}
installed=$(cat "$stamp" 2>/dev/null || true)
# The test tools' install holds all of requirements.txt: `make demo` or `make up` after
# `make test` reuses it instead of installing again.
if [[ "$installed" != "$digest" && "$installed" != "$files_digest-requirements-dev.txt" ]]; then
    echo "[setup] installing ${reqs[*]} (about a minute on a fresh machine with uv, 3 minutes with pip)"
    start=$(date +%s)
    pyspark_files='import importlib.metadata as md, sys, pyspark; sys.exit(pyspark.__version__ != md.version("pyspark"))'
    spark_before=$("$PY" -c 'import importlib.metadata as md; print(md.version("pyspark"))' 2>/dev/null || true)
    # With uv where it can, with pip's configuration (scripts/install_packages.py), else pip.
    "$PY" scripts/install_packages.py -r "${reqs[0]}" -c constraints.txt
    # The Spark provider requires pyspark-client, whose newest release (4.2.0) ships the
    # same pyspark/ Python files as pyspark and overwrites 4.3.0's with 4.2.0's, which
    # then no longer match the 4.3.0 JVM (Python UDFs fail). Put pyspark's files back
    # where that happened (a fresh .venv), not on every install: the class-data archive
    # below belongs to the jars it was dumped from, and stays valid while they stay.
    if ! "$PY" -c "$pyspark_files" 2>/dev/null; then
        "$PY" scripts/install_packages.py --no-deps --force-reinstall "pyspark==$(sed -n 's/^pyspark==//p' requirements.txt)"
        rm -f "$VENV/spark-cds.jsa"
    fi
    if [[ "$spark_before" != "$("$PY" -c 'import importlib.metadata as md; print(md.version("pyspark"))')" ]]; then
        rm -f "$VENV/spark-cds.jsa"
    fi
    echo "[setup] packages installed in $(( $(date +%s) - start )) s"
    echo "$digest" > "$stamp"
fi

# The installed packages' bytecode, which the installer writes (scripts/install_packages.py):
# where PYTHONDONTWRITEBYTECODE is set no import writes it, and every process would compile
# what it imports (`import mlflow` 5.6 CPU s instead of 1.6). An environment installed
# without it is compiled once here.
if ! "$PY" -c 'import importlib.util as u, os, sys; sys.exit(not os.path.exists(u.cache_from_source(u.find_spec("mlflow").origin)))'; then
    echo "[setup] compiling the installed packages' bytecode (about a minute, once)"
    "$PY" -m compileall -q -j 0 "$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" >/dev/null || true
fi

if ! "$PY" -c 'import horovod.torch' 2>/dev/null; then
    scripts/build_horovod.sh "$PY"
fi

"$PY" - <<'PYCHECK'
import importlib.metadata as md, pyspark
expected = md.version("pyspark")
assert pyspark.__version__ == expected, f"pyspark Python files are {pyspark.__version__}, JVM is {expected}"
PYCHECK

# Spark's classes for every job's driver JVM to map at start instead of loading them
# (scripts/spark_cds.py; about a third less CPU and wall time for a small job). Optional.
if [[ ! -f "$VENV/spark-cds.jsa" ]]; then
    echo "[setup] writing Spark's class-data sharing archive (about 40 s)"
    "$PY" scripts/spark_cds.py \
        || echo "[setup] WARNING: no class-data sharing archive (see above): Spark jobs start without it" >&2
fi
# Bytecode beside the sources of pyspark's zip, which every job's Python processes import
# (scripts/spark_pyc.py: about 1.8 CPU s less a job; a zip that has it is left alone).
"$PY" scripts/spark_pyc.py \
    || echo "[setup] WARNING: pyspark's zip keeps its sources only (see above): every job compiles pyspark again" >&2

if [[ "${reqs[0]}" == requirements-dev.txt ]]; then
    azurite_version=$(sed -n 's/^AZURITE_VERSION = "\(.*\)"$/\1/p' scripts/local_stack.py)
    azurite_home="${MLSPARK_AZURITE_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/airflow-spark-ml/azurite-$azurite_version}"
    if [[ ! -x "$azurite_home/node_modules/.bin/azurite-blob" ]]; then
        if command -v npm >/dev/null; then
            echo "[setup] installing Azurite $azurite_version into $azurite_home (about 20 s)"
            # Into a temporary folder first: an interrupted install never looks finished.
            rm -rf "$azurite_home.partial"
            npm install --prefix "$azurite_home.partial" --no-audit --no-fund --loglevel=error "azurite@$azurite_version"
            rm -rf "$azurite_home"
            mv "$azurite_home.partial" "$azurite_home"
        else
            echo "[setup] WARNING: npm not found: tests/azure will fail (install Node.js, rerun)" >&2
        fi
    fi
    # The browser tests (tests/platform) drive Debian's Chromium through Playwright, which
    # cannot download a browser of its own here.
    if [[ ! -x /usr/bin/chromium ]]; then
        if command -v apt-get >/dev/null && [[ $(id -u) == 0 ]]; then
            echo "[setup] installing Debian's chromium for the browser tests (about a minute)"
            { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium; } \
                >/tmp/setup-chromium.log 2>&1 \
                || echo "[setup] WARNING: apt-get could not install chromium (see /tmp/setup-chromium.log): the browser tests will fail" >&2
        else
            echo "[setup] WARNING: no /usr/bin/chromium and no root apt-get: the browser tests will fail (apt-get install chromium)" >&2
        fi
    fi
fi

"$PY" scripts/package_jobs.py
