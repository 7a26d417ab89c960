"""Zip the ``spark_jobs`` package for spark-submit ``--py-files``.

A cluster's executors import job code from this archive, exactly as they would from a
remote deployment; the local default uses the same path so both are tested alike.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUTPUT = REPO / "build" / "spark_jobs.zip"
CONTRACT = "ml_contract"


def package_jobs(output: Path = DEFAULT_OUTPUT, source_root: Path = REPO) -> Path:
    """Write the archive of ``<source_root>/spark_jobs`` and the contract package
    (``<source_root>/plugins/ml_contract``, as ``ml_contract/``) atomically (a running job never sees
    a half-written zip). The package includes the workflow declarations and their model
    modules (``spark_jobs/workflows/*.toml``, ``*.py``): a new workflow's two files are in
    the archive once it is rebuilt.

    Safe for concurrent callers (two pytest-xdist workers, a test run beside ``make demo``):
    each writes a temporary file of its own beside ``output`` and renames it over ``output``,
    so the last rename wins and every reader sees one whole archive."""
    output.parent.mkdir(parents=True, exist_ok=True)
    handle, tmp_name = tempfile.mkstemp(prefix=f".{output.name}.", suffix=".tmp", dir=output.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(handle, "wb") as file, zipfile.ZipFile(file, "w", zipfile.ZIP_DEFLATED) as archive:
            # The code, and the workflow declarations the jobs read (spark_jobs/workflows/*.toml).
            package = source_root / "spark_jobs"
            sources = [*package.rglob("*.py"), *package.rglob("*.toml")]
            for source in sorted(p for p in sources if "__pycache__" not in p.parts):
                archive.write(source, source.relative_to(source_root).as_posix())
            # The contract the jobs share with the DAGs, a top-level package beside spark_jobs
            # (on the scheduler's path it is plugins/ml_contract).
            contract = source_root / "plugins" / CONTRACT
            for source in sorted(p for p in contract.rglob("*.py") if "__pycache__" not in p.parts):
                archive.write(source, source.relative_to(contract.parent).as_posix())
        tmp.chmod(0o644)  # mkstemp's 0600 would keep the archive from other users' Spark workers
        tmp.replace(output)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return output


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    print(f"[setup] spark_jobs archive: {package_jobs(parser.parse_args().output)}")
