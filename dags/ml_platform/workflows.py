"""The workflows the DAGs are generated for, read from their declarations.

Each workflow is declared once, in ``spark_jobs/workflows/<name>.toml``. Every declaration
is parsed and checked here, when the DAG files are imported, with the contract's parser
(:func:`ml_contract.workflows.parse_workflow`, the one the jobs use): a bad declaration is a
DAG import error naming the key and what is allowed, in the UI, not a failed job at 02:00.
The DAGs read what shapes them: the name, the one-line description, the registered model's
name, the training defaults (the nightly's settings and the on-demand form's defaults) and
the metric (for the docs). No job code is imported (``dags/`` reaches ``spark_jobs/`` by
path only): the contract imports neither Spark nor torch.

``ML_WORKFLOWS`` (comma-separated names) limits the DAGs to some workflows; by default
every declared workflow gets its DAGs. ``ML_WORKFLOWS_DIR`` points at another folder of
declarations (it must be the one the jobs' ``--py-files`` archive was built from).
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from ml_contract.workflows import Monitoring, WorkflowError, parse_workflow

REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class WorkflowInfo:
    name: str
    description: str
    model_name: str
    epochs: int
    learning_rate: float
    batch_size: int
    metric: str
    metric_direction: str
    floor: float
    monitoring: Monitoring

    @property
    def metric_goal(self) -> str:
        """``accuracy >= 0.93`` or ``rmse <= 70.0``: the promotion floor, for docs."""
        return f"{self.metric} {'>=' if self.metric_direction == 'max' else '<='} {self.floor:g}"


def workflows_dir() -> Path:
    return Path(os.environ.get("ML_WORKFLOWS_DIR") or REPO_ROOT / "spark_jobs" / "workflows")


@cache
def _read(path: Path) -> WorkflowInfo:
    try:
        declaration = parse_workflow(tomllib.loads(path.read_text(encoding="utf-8")), f"workflow {path}")
    except tomllib.TOMLDecodeError as err:
        raise WorkflowError(f"workflow {path} is not valid TOML: {err}") from err
    training = declaration.model.training
    return WorkflowInfo(
        name=declaration.name,
        description=declaration.description,
        model_name=declaration.model.registered_name,
        epochs=training.epochs,
        learning_rate=training.learning_rate,
        batch_size=training.batch_size,
        metric=declaration.metric.name,
        metric_direction=declaration.metric.direction,
        floor=declaration.promotion.floor,
        monitoring=declaration.monitoring,
    )


def declared() -> list[str]:
    return sorted(p.stem for p in workflows_dir().glob("*.toml"))


def enabled() -> list[WorkflowInfo]:
    """The workflows to generate DAGs for (``ML_WORKFLOWS``, default all), in name order."""
    names = declared()
    wanted = [n.strip() for n in os.environ.get("ML_WORKFLOWS", "").split(",") if n.strip()]
    unknown = sorted(set(wanted) - set(names))
    if unknown:
        raise ValueError(f"ML_WORKFLOWS names undeclared workflows {unknown}; declared: {names}")
    return [workflow(n) for n in (sorted(set(wanted)) if wanted else names)]


def workflow(name: str) -> WorkflowInfo:
    path = workflows_dir() / f"{name}.toml"
    if not path.is_file():
        raise ValueError(f"no workflow {name!r} in {workflows_dir()}; declared: {declared()}")
    info = _read(path)
    if info.name != name:
        raise ValueError(f"{path} declares name {info.name!r}")
    return info
