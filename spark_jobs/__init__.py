"""Spark computation for the ML workflows: one importable module per step.

Nothing here imports Airflow; every job gets its inputs as command-line arguments
(see each module's ``main(argv)``) and is submitted by a thin file in ``entrypoints/``.

The rules the jobs share with the DAGs (the workflow schema, the partition layout, the
held-out split) are the contract package :mod:`ml_contract`: in the jobs' ``--py-files``
archive beside this package; from the source tree it lives in ``plugins/``, which is put on
``sys.path`` here when nothing else has (scripts, benchmarks, a job run by hand).
"""

import importlib.util
import sys
from pathlib import Path

if importlib.util.find_spec("ml_contract") is None:  # the source tree, not the archive
    sys.path.append(str(Path(__file__).resolve().parent.parent / "plugins"))
