"""The workflow declaration: its keys, their types and allowed values, and their checks.

A workflow is one TOML file, ``spark_jobs/workflows/<name>.toml``; everything else (ingest,
distributed training, registration, the registry gate, scoring, DAG shapes, partitions,
backfills) is shared code that reads it. Keys:

``name``, ``description``
    The workflow's id (DAG ids, registered model and experiment names derive from it)
    and one line for the DAG list.
``[dataset]``
    ``raw_format`` (``csv``: one row per line, an optional header naming the fields) and
    ``sample`` (optional, ``module:callable``: ``(ds, rows, *, seed, augment) -> (labels [n],
    features [n, *shape])``, the offline sample data the demo and tests drop), and
    ``label`` (``name``, ``dtype`` ``int32`` for a class or ``float32`` for a value,
    ``min``, ``max``): the target, the raw rows' first field.
``[features]``
    ``layout = "tensor"``: one fixed-shape tensor per row: ``shape``, ``dtype`` (``uint8``
    or ``float32``), ``min``/``max`` for every element, read from the raw fields
    ``<raw_field_prefix>0..N-1`` in row-major order. ``layout = "tabular"``: named
    ``columns = [{name, min, max}, ...]`` in ``dtype``, stored as a tensor of shape
    ``[len(columns)]``.
``[model]``
    ``registered_name`` (the registered model and experiment; default the name),
    ``factory`` (``module:callable`` returning the ``torch.nn.Module`` to train; it takes
    the features tensor ``[batch, *shape]`` in their stored dtype and must be TorchScript-able),
    ``loss`` (``nll`` on log-probabilities, ``mse``) and ``[model.training]``: how the model is
    trained (:class:`Training`; every key is checked, an unknown one is refused):

    - ``epochs``, ``batch_size`` (per rank), ``learning_rate`` (the base rate, scaled by the
      number of ranks);
    - ``optimizer``: ``sgd`` (with ``momentum``, default 0), ``adam`` or ``adamw`` (with
      ``betas``, default ``[0.9, 0.999]``); ``weight_decay`` (default 0; decoupled for adamw);
    - ``clip_grad_norm``: the largest L2 norm of the averaged gradients (default 0: none);
    - ``[model.training.schedule]``: ``warmup_epochs`` (a linear warm-up, per step, from a
      small rate to the rank-scaled one; default 0) and ``kind`` (``constant``, ``cosine``
      to zero at the last epoch, or ``step``: times ``gamma`` every ``step_epochs``);
    - ``[model.training.early_stopping]``: ``patience`` epochs without an improvement of the
      validation metric by more than ``min_delta`` stop training (default patience 0: never);
    - ``[model.training.divergence]``: a non-finite loss, or a validation loss above
      ``factor`` times the lowest so far for ``patience`` epochs in a row, stops training
      (defaults 4.0 and 2).

    Whatever stops it, the model kept is the epoch with the best validation metric.
``[metric]``
    ``name`` and ``direction`` (``max`` or ``min``) of the held-out metric.
``[promotion]``
    ``floor`` (the metric a version must reach) and ``tolerance`` (how much worse than the
    champion, on the same rows, it may be).
    For ``nll`` the module returns log-probabilities ``[batch, classes]``, for ``mse`` a
    value per row (``[batch]`` or ``[batch, 1]``); the logged serving form wraps it
    (probabilities, or the value) so every workflow is scored the same way.
``[output]``
    ``kind = "class_probabilities"`` with ``classes``: columns ``prediction`` and
    ``prob_0..prob_<classes-1>``; ``kind = "regression"``: column ``prediction``.

Whatever the layout, the curated table holds a row's features as **one dense value**:
column ``features``, the row's elements in the declared dtype, little-endian, row-major
(see :mod:`spark_jobs.features`). A batch crosses from the JVM to Python as one buffer.

Part of the contract both sides of the Airflow/Spark line import (:mod:`ml_contract`): the
DAG files parse every declaration with :func:`parse_workflow` when they are imported, so a
bad declaration is a DAG import error naming the key, and the jobs parse the same way
(``spark_jobs.workflows.load``). It imports neither Airflow, Spark nor torch.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # numpy is imported where an array is made: the DAG files parse without it
    import numpy as np

__all__ = [
    "DIRECTIONS",
    "FEATURE_DTYPES",
    "FIELD_NAME",
    "LABEL_DTYPES",
    "LOSSES",
    "METRICS",
    "NAME",
    "OPTIMIZERS",
    "OUTPUT_KINDS",
    "SCHEDULES",
    "TRAINING_KEYS",
    "FeatureColumn",
    "Label",
    "Metric",
    "Model",
    "Output",
    "Promotion",
    "TensorFeatures",
    "Training",
    "Workflow",
    "WorkflowError",
    "parse_training",
    "parse_workflow",
]

NAME = re.compile(r"^[a-z][a-z0-9_]{0,40}$")
# A raw field's name (the label, a tabular column, a tensor's field prefix): what a CSV header
# may name, so that ingest can tell a header line from a row (spark_jobs.ingest).
FIELD_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
DIRECTIONS = ("max", "min")
LOSSES = ("nll", "mse")
METRICS = ("accuracy", "rmse")
OUTPUT_KINDS = ("class_probabilities", "regression")
FEATURE_DTYPES = ("uint8", "float32")
# The values each feature dtype holds (numpy's iinfo/finfo), written out so that parsing a
# declaration, which every DAG file does, needs no numpy (a quarter of a second per parse).
DTYPE_LIMITS = {"uint8": (0, 255), "float32": (-3.4028234663852886e38, 3.4028234663852886e38)}
LABEL_DTYPES = ("int32", "float32")


class WorkflowError(ValueError):
    """A workflow declaration is missing, malformed or inconsistent."""


@dataclass(frozen=True)
class Label:
    name: str
    dtype: str
    min: float
    max: float


@dataclass(frozen=True)
class FeatureColumn:
    """One element of the feature tensor: its raw field name and allowed range."""

    name: str
    min: float
    max: float


@dataclass(frozen=True)
class TensorFeatures:
    """The row's features as one fixed-shape tensor (both layouts end up as one).

    ``layout`` is ``tensor`` (an image-like block, elements named ``<prefix>0..N-1``) or
    ``tabular`` (named columns, shape ``[len(columns)]``); ``columns`` lists every element in
    row-major order with its raw field name and range.
    """

    layout: str
    shape: tuple[int, ...]
    dtype: str
    columns: tuple[FeatureColumn, ...]

    @property
    def size(self) -> int:
        """Elements per row."""
        return math.prod(self.shape)

    @property
    def numpy_dtype(self) -> np.dtype:
        import numpy as np

        return np.dtype(self.dtype).newbyteorder("<")

    @property
    def is_integer(self) -> bool:
        import numpy as np

        return np.issubdtype(self.numpy_dtype, np.integer)

    @property
    def item_bytes(self) -> int:
        """Bytes of one row's ``features`` value."""
        return self.size * self.numpy_dtype.itemsize

    @property
    def raw_fields(self) -> list[str]:
        return [c.name for c in self.columns]

    @property
    def mins(self) -> np.ndarray:
        import numpy as np

        return np.array([c.min for c in self.columns], dtype=np.float64)

    @property
    def maxs(self) -> np.ndarray:
        import numpy as np

        return np.array([c.max for c in self.columns], dtype=np.float64)


OPTIMIZERS = ("sgd", "adam", "adamw")
SCHEDULES = ("constant", "cosine", "step")


@dataclass(frozen=True)
class Training:
    """``[model.training]``: how a workflow's model is trained (see the module docstring)."""

    epochs: int
    learning_rate: float
    batch_size: int
    optimizer: str = "sgd"
    momentum: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    weight_decay: float = 0.0
    clip_grad_norm: float = 0.0
    warmup_epochs: float = 0.0
    schedule: str = "constant"
    step_epochs: int = 1
    gamma: float = 0.1
    early_stopping_patience: int = 0
    early_stopping_min_delta: float = 0.0
    divergence_factor: float = 4.0
    divergence_patience: int = 2


@dataclass(frozen=True)
class Model:
    factory: str
    loss: str
    training: Training
    registered_name: str


@dataclass(frozen=True)
class Metric:
    name: str
    direction: str

    def better(self, a: float, b: float) -> bool:
        """Whether ``a`` is strictly better than ``b``."""
        return a > b if self.direction == "max" else a < b


@dataclass(frozen=True)
class Promotion:
    floor: float
    tolerance: float


@dataclass(frozen=True)
class Output:
    """``class_probabilities``: ``prediction`` (int, the argmax class) and ``prob_<c>``
    (double) for each of ``classes``; ``regression``: ``prediction`` (double)."""

    kind: str
    classes: int = 0

    @property
    def is_classifier(self) -> bool:
        return self.kind == "class_probabilities"

    @property
    def columns(self) -> list[str]:
        """The output columns a scored row carries, in order."""
        return ["prediction", *[f"prob_{c}" for c in range(self.classes)]]


@dataclass(frozen=True)
class Workflow:
    name: str
    description: str
    raw_format: str
    sample: str | None
    label: Label
    features: TensorFeatures
    model: Model
    metric: Metric
    promotion: Promotion
    output: Output

    @property
    def raw_fields(self) -> list[str]:
        """The raw CSV's fields in order: the label, then the features' fields."""
        return [self.label.name, *self.features.raw_fields]


def _section(data: dict, key: str, source: str) -> dict:
    value = data.get(key)
    if not isinstance(value, dict):
        raise WorkflowError(f"{source}: missing table [{key}]")
    return value


def _get(table: dict, key: str, kind: type | tuple[type, ...], source: str):
    if key not in table:
        raise WorkflowError(f"{source}: missing key {key!r}")
    value = table[key]
    if isinstance(value, bool) or not isinstance(value, kind):
        raise WorkflowError(f"{source}: {key!r} must be {kind}, got {value!r}")
    return value


def _choice(table: dict, key: str, allowed: tuple[str, ...], source: str) -> str:
    value = _get(table, key, str, source)
    if value not in allowed:
        raise WorkflowError(f"{source}: {key!r} is {value!r}, allowed: {', '.join(allowed)}")
    return value


def parse_workflow(data: dict, source: str) -> Workflow:
    """A :class:`Workflow` from a parsed TOML document; :class:`WorkflowError` names what is wrong."""
    number = (int, float)
    name = _get(data, "name", str, source)
    if not NAME.match(name):
        raise WorkflowError(f"{source}: name {name!r} must match {NAME.pattern}")
    dataset = _section(data, "dataset", source)
    raw_format = _choice(dataset, "raw_format", ("csv",), f"{source} [dataset]")
    label_t = _get(dataset, "label", dict, f"{source} [dataset]")
    label = Label(
        name=_field_name(_get(label_t, "name", str, f"{source} [dataset.label]"), f"{source} [dataset.label]"),
        dtype=_choice(label_t, "dtype", LABEL_DTYPES, f"{source} [dataset.label]"),
        min=_get(label_t, "min", number, f"{source} [dataset.label]"),
        max=_get(label_t, "max", number, f"{source} [dataset.label]"),
    )
    features = _parse_features(_section(data, "features", source), f"{source} [features]")
    model_t = _section(data, "model", source)
    training_t = _section(model_t, "training", f"{source} [model]")
    src = f"{source} [model.training]"
    model = Model(
        factory=_get(model_t, "factory", str, f"{source} [model]"),
        loss=_choice(model_t, "loss", LOSSES, f"{source} [model]"),
        registered_name=model_t.get("registered_name", name),
        training=parse_training(training_t, src),
    )
    metric_t = _section(data, "metric", source)
    metric = Metric(
        name=_choice(metric_t, "name", METRICS, f"{source} [metric]"),
        direction=_choice(metric_t, "direction", DIRECTIONS, f"{source} [metric]"),
    )
    promotion_t = _section(data, "promotion", source)
    promotion = Promotion(
        floor=float(_get(promotion_t, "floor", number, f"{source} [promotion]")),
        tolerance=float(_get(promotion_t, "tolerance", number, f"{source} [promotion]")),
    )
    output_t = _section(data, "output", source)
    kind = _choice(output_t, "kind", OUTPUT_KINDS, f"{source} [output]")
    output = Output(
        kind=kind,
        classes=_get(output_t, "classes", int, f"{source} [output]") if kind == "class_probabilities" else 0,
    )
    _check_consistent(label, model, metric, output, source)
    return Workflow(
        name=name,
        description=_get(data, "description", str, source),
        raw_format=raw_format,
        sample=_get(dataset, "sample", str, f"{source} [dataset]") if "sample" in dataset else None,
        label=label,
        features=features,
        model=model,
        metric=metric,
        promotion=promotion,
        output=output,
    )


def _known_keys(table: dict, allowed: tuple[str, ...], source: str) -> None:
    unknown = sorted(set(table) - set(allowed))
    if unknown:
        raise WorkflowError(f"{source}: unknown key {unknown[0]!r}, allowed: {', '.join(allowed)}")


def _bounded(table: dict, key: str, kind, source: str, *, low=None, high=None, low_open=False, high_open=False):
    """``table[key]`` of ``kind`` within ``low``..``high`` (open ends where said); the error
    names the key and the allowed range."""
    value = _get(table, key, kind, source)
    too_low = low is not None and (value <= low if low_open else value < low)
    too_high = high is not None and (value >= high if high_open else value > high)
    if too_low or too_high or (isinstance(value, float) and not math.isfinite(value)):
        lower = "" if low is None else f"{'>' if low_open else '>='} {low}"
        upper = "" if high is None else f"{'<' if high_open else '<='} {high}"
        allowed = " and ".join(filter(None, [lower, upper]))
        raise WorkflowError(f"{source}: {key!r} is {value!r}, allowed: {allowed}")
    return value


TRAINING_KEYS = (
    "epochs",
    "learning_rate",
    "batch_size",
    "optimizer",
    "momentum",
    "betas",
    "weight_decay",
    "clip_grad_norm",
    "schedule",
    "early_stopping",
    "divergence",
)


def parse_training(table: dict, source: str) -> Training:
    """``[model.training]`` and its sub-tables as a :class:`Training`; every key checked,
    unknown keys refused, each error naming the key and what is allowed."""
    number = (int, float)
    _known_keys(table, TRAINING_KEYS, source)
    epochs = _bounded(table, "epochs", int, source, low=1, high=1000)
    given: dict = {
        "epochs": epochs,
        "learning_rate": float(_bounded(table, "learning_rate", number, source, low=0, high=10, low_open=True)),
        "batch_size": _bounded(table, "batch_size", int, source, low=1, high=65536),
    }
    optimizer = _choice(table, "optimizer", OPTIMIZERS, source) if "optimizer" in table else "sgd"
    given["optimizer"] = optimizer
    if "momentum" in table:
        if optimizer != "sgd":
            raise WorkflowError(
                f"{source}: 'momentum' applies to optimizer 'sgd' only, not {optimizer!r} (see 'betas')"
            )
        given["momentum"] = float(_bounded(table, "momentum", number, source, low=0, high=1, high_open=True))
    if "betas" in table:
        if optimizer == "sgd":
            raise WorkflowError(f"{source}: 'betas' applies to optimizers 'adam' and 'adamw' only (see 'momentum')")
        betas = _get(table, "betas", list, source)
        if len(betas) != 2 or not all(isinstance(b, number) and not isinstance(b, bool) and 0 <= b < 1 for b in betas):
            raise WorkflowError(f"{source}: 'betas' is {betas!r}, allowed: two numbers >= 0 and < 1")
        given["betas"] = (float(betas[0]), float(betas[1]))
    for key in ("weight_decay", "clip_grad_norm"):
        if key in table:
            given[key] = float(_bounded(table, key, number, source, low=0))
    if "schedule" in table:
        sub = f"{source.removesuffix(']')}.schedule]"
        schedule = _get(table, "schedule", dict, source)
        _known_keys(schedule, ("kind", "warmup_epochs", "step_epochs", "gamma"), sub)
        kind = _choice(schedule, "kind", SCHEDULES, sub) if "kind" in schedule else "constant"
        given["schedule"] = kind
        if "warmup_epochs" in schedule:
            given["warmup_epochs"] = float(
                _bounded(schedule, "warmup_epochs", number, sub, low=0, high=epochs, high_open=True)
            )
        if kind != "step" and ({"step_epochs", "gamma"} & set(schedule)):
            raise WorkflowError(f"{sub}: 'step_epochs' and 'gamma' apply to kind 'step' only, not {kind!r}")
        if kind == "step":
            given["step_epochs"] = _bounded(schedule, "step_epochs", int, sub, low=1)
            given["gamma"] = float(_bounded(schedule, "gamma", number, sub, low=0, high=1, low_open=True))
    if "early_stopping" in table:
        sub = f"{source.removesuffix(']')}.early_stopping]"
        stopping = _get(table, "early_stopping", dict, source)
        _known_keys(stopping, ("patience", "min_delta"), sub)
        given["early_stopping_patience"] = _bounded(stopping, "patience", int, sub, low=1)
        if "min_delta" in stopping:
            given["early_stopping_min_delta"] = float(_bounded(stopping, "min_delta", number, sub, low=0))
    if "divergence" in table:
        sub = f"{source.removesuffix(']')}.divergence]"
        divergence = _get(table, "divergence", dict, source)
        _known_keys(divergence, ("factor", "patience"), sub)
        if "factor" in divergence:
            given["divergence_factor"] = float(_bounded(divergence, "factor", number, sub, low=1, low_open=True))
        if "patience" in divergence:
            given["divergence_patience"] = _bounded(divergence, "patience", int, sub, low=1)
    return Training(**given)


def _parse_features(table: dict, source: str) -> TensorFeatures:
    number = (int, float)
    layout = _choice(table, "layout", ("tensor", "tabular"), source)
    dtype = _choice(table, "dtype", FEATURE_DTYPES, source)
    if layout == "tensor":
        shape = _get(table, "shape", list, source)
        if not shape or not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in shape):
            raise WorkflowError(f"{source}: shape must be a list of positive integers, got {shape!r}")
        low, high = _get(table, "min", number, source), _get(table, "max", number, source)
        prefix = _field_name(_get(table, "raw_field_prefix", str, source), source)
        columns = tuple(FeatureColumn(f"{prefix}{i}", low, high) for i in range(math.prod(shape)))
    else:
        listed = _get(table, "columns", list, source)
        if not listed:
            raise WorkflowError(f"{source}: columns must list at least one column")
        columns = tuple(
            FeatureColumn(
                _field_name(_get(c, "name", str, f"{source} columns[{i}]"), f"{source} columns[{i}]"),
                _get(c, "min", number, f"{source} columns[{i}]"),
                _get(c, "max", number, f"{source} columns[{i}]"),
            )
            if isinstance(c, dict)
            else _bad_column(c, i, source)
            for i, c in enumerate(listed)
        )
        shape = [len(columns)]
    names = [c.name for c in columns]
    if len(set(names)) != len(names):
        raise WorkflowError(f"{source}: column names repeat")
    limits = DTYPE_LIMITS[dtype]
    for column in columns:
        if not limits[0] <= column.min <= column.max <= limits[1]:
            raise WorkflowError(
                f"{source}: {column.name} range {column.min}..{column.max} must be ordered and fit {dtype}"
            )
    return TensorFeatures(layout=layout, shape=tuple(shape), dtype=dtype, columns=columns)


def _field_name(name: str, source: str) -> str:
    if not re.fullmatch(FIELD_NAME, name):
        raise WorkflowError(
            f"{source}: name {name!r} is not a CSV field name: letters, digits and '_', not starting "
            "with a digit (a header naming it could not be told from a row)"
        )
    return name


def _bad_column(value, index: int, source: str):
    raise WorkflowError(f"{source}: columns[{index}] must be a table {{name, min, max}}, got {value!r}")


def _check_consistent(label: Label, model: Model, metric: Metric, output: Output, source: str) -> None:
    """A classifier is trained with ``nll`` on an integer label and measured by accuracy
    (higher is better); a regressor with ``mse`` on a float label, measured by RMSE (lower)."""
    if output.is_classifier:
        expected = {
            "label dtype": ("int32", label.dtype),
            "loss": ("nll", model.loss),
            "metric": ("accuracy", metric.name),
        }
        if output.classes < 2 or label.min != 0 or label.max != output.classes - 1:
            raise WorkflowError(f"{source}: a classifier needs classes >= 2 and labels 0..classes-1")
    else:
        expected = {
            "label dtype": ("float32", label.dtype),
            "loss": ("mse", model.loss),
            "metric": ("rmse", metric.name),
        }
    for what, (want, got) in expected.items():
        if want != got:
            raise WorkflowError(f"{source}: a {output.kind} workflow needs {what} {want!r}, got {got!r}")
    wanted_direction = "max" if metric.name == "accuracy" else "min"
    if metric.direction != wanted_direction:
        raise WorkflowError(
            f"{source}: metric {metric.name} has direction {wanted_direction!r}, got {metric.direction!r}"
        )
