"""Command lines of the Spark jobs, built in one place for the DAGs' tasks, the tests and the
benchmarks (which import this module: it imports nothing of Airflow). The jobs' own
``argparse`` (``spark_jobs/<job>.py``) is the other side of each contract; a test parses every
builder's command line with it (``tests/unit/test_job_arguments.py``).

A value may be a template or an upstream task's output (rendered when the task runs); None
leaves an option to the job's default. Field ``work_dir`` is option ``--work-dir``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any, ClassVar


@dataclass(frozen=True)
class JobArguments:
    """``--option value`` per field that is not None, in field order. A field in ``FLAGS``
    is an on/off option (``--promote`` / ``--no-promote``), given as a bool or as a template
    rendering to one of the two; a field in ``REPEATED`` is a sequence, one option per item."""

    job: ClassVar[str]
    FLAGS: ClassVar[frozenset[str]] = frozenset()
    REPEATED: ClassVar[dict[str, str]] = {}

    def argv(self) -> list[Any]:
        argv: list[Any] = []
        for f in fields(self):
            value = getattr(self, f.name)
            option = f"--{f.name.replace('_', '-')}"
            if value is None:
                continue
            if f.name in self.REPEATED:
                for item in value:
                    argv += [self.REPEATED[f.name], as_argument(item)]
            elif f.name in self.FLAGS:
                argv.append(value if isinstance(value, str) else option if value else f"--no-{option[2:]}")
            else:
                argv += [option, as_argument(value)]
        return argv


@dataclass(frozen=True)
class IngestArguments(JobArguments):
    """``spark_jobs/entrypoints/ingest.py``: one day's raw drop into curated and quarantine."""

    job: ClassVar[str] = "ingest"

    workflow: Any
    ds: Any
    raw_path: Any
    curated_root: Any
    quarantine_root: Any
    max_bad_ratio: Any = None
    manifest_path: Any = None


@dataclass(frozen=True)
class TrainArguments(JobArguments):
    """``spark_jobs/entrypoints/train.py``. None leaves an option to the job's default (the
    workflow's ``[model.training]``, one rank per Spark slot); each tag is ``KEY=VALUE``."""

    job: ClassVar[str] = "train"
    REPEATED: ClassVar[dict[str, str]] = {"tags": "--tag"}

    workflow: Any
    curated_root: Any
    start_ds: Any
    end_ds: Any
    work_dir: Any
    output_manifest: Any
    experiment_name: Any
    epochs: Any = None
    learning_rate: Any = None
    batch_size: Any = None
    momentum: Any = None  # SGD's (default: the workflow's)
    num_ranks: Any = None
    backend: Any = None
    holdout_pct: Any = None
    split_seed: Any = None
    seed: Any = None  # the ranks' initial weights and shuffles (default: the job's)
    checkpoint_dir: Any = None
    bind_cores: Any = None  # "on" | "off"
    tags: Sequence[str] = ()


@dataclass(frozen=True)
class RegisterArguments(JobArguments):
    """``spark_jobs/entrypoints/register.py``: the trained model evaluated on the held-out
    rows, registered, and promoted when the rule says so (``promote`` False: never)."""

    job: ClassVar[str] = "register"
    FLAGS: ClassVar[frozenset[str]] = frozenset({"promote"})
    REPEATED: ClassVar[dict[str, str]] = {"tags": "--tag"}

    workflow: Any
    train_manifest: Any
    output_manifest: Any
    curated_root: Any
    start_ds: Any
    end_ds: Any
    model_name: Any
    logical_time: Any
    holdout_pct: Any = None
    split_seed: Any = None
    floor: Any = None
    tolerance: Any = None
    git_revision: Any = None
    airflow_run_id: Any = None
    lock_timeout: Any = None
    lock_stale_after: Any = None
    promote: Any = None
    tags: Sequence[str] = ()  # extra version tags, each KEY=VALUE


@dataclass(frozen=True)
class ScoreArguments(JobArguments):
    """``spark_jobs/entrypoints/score.py``: one day (``ds``) or a range (``start_ds`` and
    ``end_ds``) of curated rows scored with one pinned model."""

    job: ClassVar[str] = "score"

    model: Any
    input_data: Any
    scored_data: Any
    workflow: Any = None
    monitoring_data: Any = None  # the drift reports' root: each scored day checked
    shadow_alias: Any = None  # an alias scored beside the model (its agreement logged), e.g. challenger
    ds: Any = None
    start_ds: Any = None
    end_ds: Any = None

    def __post_init__(self) -> None:
        if (self.ds is None) == (self.start_ds is None) or (self.start_ds is None) != (self.end_ds is None):
            raise ValueError("ScoreArguments: give ds, or start_ds and end_ds")


@dataclass(frozen=True)
class FeedbackArguments(JobArguments):
    """``spark_jobs/entrypoints/feedback.py``: the late labels of scored days (``ds``, or
    ``start_ds`` and ``end_ds``) against what was scored, a realised metric per version."""

    job: ClassVar[str] = "feedback"

    workflow: Any
    labels_data: Any
    scored_data: Any
    monitoring_data: Any
    ds: Any = None
    start_ds: Any = None
    end_ds: Any = None


def as_argument(value: Any) -> Any:
    """Numbers and paths as text; strings and upstream outputs (XComArgs) unchanged."""
    if isinstance(value, (int, float)) or hasattr(value, "__fspath__"):
        return str(value)
    return value
