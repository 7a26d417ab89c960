"""Bytecode beside the sources of pyspark's zip (scripts/spark_pyc.py): used by Python's zip
importer while it matches its source and this interpreter, the source otherwise; and, after
``scripts/setup_env.sh``, what a job's driver and its Python workers import pyspark from."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import spark_pyc  # scripts/ (tests/conftest.py)

SOURCES = {
    "pkg/__init__.py": "",
    "pkg/mod.py": "VALUE = 'from the zip'\n",
    "pkg/tests/test_mod.py": "def test_nothing():\n    pass\n",
    "pkg/broken.py": "def (:\n",
}


def write_zip(path: Path, files: dict[str, str | bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return path


def imported(zip_path: Path, module: str) -> tuple[str, str]:
    """``(module.__file__, module.VALUE)`` as a fresh interpreter imports it from ``zip_path``."""
    code = f"import {module} as m; print(m.__file__); print(m.VALUE)"
    done = subprocess.run(
        [sys.executable, "-c", code], env={"PYTHONPATH": str(zip_path)}, capture_output=True, text=True, check=True
    )
    file, value = done.stdout.split("\n")[:2]
    return file, value


def test_each_source_gets_bytecode_that_the_zip_importer_uses(tmp_path):
    archive = write_zip(tmp_path / "lib.zip", SOURCES)
    assert not spark_pyc.has_bytecode(archive)
    assert spark_pyc.precompile(archive) == 2  # pkg/__init__, pkg/mod; not the test, not what fails to compile
    names = set(zipfile.ZipFile(archive).namelist())
    assert names == set(SOURCES) | {"pkg/__init__.pyc", "pkg/mod.pyc"}, names
    assert spark_pyc.has_bytecode(archive)
    assert imported(archive, "pkg.mod") == (f"{archive}/pkg/mod.pyc", "from the zip")
    before = archive.read_bytes()
    assert spark_pyc.main([str(archive)]) == 0
    assert archive.read_bytes() == before  # a zip that has it is left alone


def test_bytecode_whose_source_changed_is_not_used(tmp_path):
    archive = write_zip(tmp_path / "lib.zip", SOURCES)
    spark_pyc.precompile(archive)
    with zipfile.ZipFile(archive) as old:
        files = {name: old.read(name) for name in old.namelist()}
    files["pkg/mod.py"] = b"VALUE = 'the new source'\n"  # the stale pkg/mod.pyc kept beside it
    rewritten = write_zip(tmp_path / "rewritten.zip", files)
    assert imported(rewritten, "pkg.mod")[1] == "the new source"


def test_bytecode_of_another_python_is_not_used(tmp_path):
    archive = write_zip(tmp_path / "lib.zip", SOURCES)
    spark_pyc.precompile(archive)
    with zipfile.ZipFile(archive) as old:
        files = {name: old.read(name) for name in old.namelist()}
    files["pkg/mod.pyc"] = b"\x00\x00\r\n" + files["pkg/mod.pyc"][4:]  # another magic number
    files["pkg/mod.py"] = b"VALUE = 'compiled here'\n"
    other = write_zip(tmp_path / "other.zip", files)
    assert not spark_pyc.has_bytecode(write_zip(tmp_path / "only.zip", {"pkg/mod.py": "", "pkg/mod.pyc": b"xxxx"}))
    assert imported(other, "pkg.mod")[1] == "compiled here"


JOB = """
import pyspark
from pyspark.sql import SparkSession

spark = SparkSession.builder.getOrCreate()


def worker_modules(_):
    import pyspark.worker

    yield pyspark.worker.__file__


print("DRIVER", pyspark.__file__)
for path in set(spark.sparkContext.parallelize([1, 2], 2).mapPartitions(worker_modules).collect()):
    print("WORKER", path)
spark.stop()
"""


def test_a_jobs_driver_and_workers_import_pyspark_as_bytecode(tmp_path, spark_submit):
    (zip_path,) = [p for p in spark_pyc.spark_zips() if p.name == "pyspark.zip"]
    assert spark_pyc.has_bytecode(zip_path), f"{zip_path} has no bytecode: scripts/setup_env.sh writes it"
    job = tmp_path / "job.py"
    job.write_text(JOB)
    done = spark_submit(job, [], "")
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [line.split(" ", 1) for line in done.stdout.splitlines() if line.startswith(("DRIVER ", "WORKER "))]
    assert {kind for kind, _ in lines} == {"DRIVER", "WORKER"}, done.stdout
    for kind, path in lines:
        assert path.startswith(f"{zip_path}/pyspark/") and path.endswith(".pyc"), (kind, path)
