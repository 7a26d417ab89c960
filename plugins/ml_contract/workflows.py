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
    trained (:class:`Training`):

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
``[monitoring]`` (optional; absent: every default)
    What watches a model once it scores (:class:`Monitoring`): ``drift`` (default true: a
    drift check after every scoring run), ``false_alarm_rate`` (the share of days from the
    training distribution that may be flagged, over all statistics together; default 0.01),
    ``statistics`` (what is compared with the version's reference: a tabular layout's column
    names, default all; a tensor layout's row summaries ``mean``, ``std``, ``nonzero``,
    default all three; the predictions always), ``tolerance`` (how much worse than the
    version's held-out metric a day's realised metric, from late labels, may be; default the
    promotion tolerance), ``min_labels`` (the fewest labelled rows of a day and version whose
    realised metric is judged; default 100), ``retrain_window_days`` (the window a retraining on evidence trains
    on; default the nightly's), ``cooldown_days`` (after a retraining on evidence,
    evidence from the next days starts none; default 7) and ``shadow`` (default false: the
    ``challenger`` scored beside the scored version in the same pass, their agreement logged
    per day).

Whatever the layout, the curated table holds a row's features as **one dense value**:
column ``features``, the row's elements in the declared dtype, little-endian, row-major
(see :mod:`spark_jobs.features`). A batch crosses from the JVM to Python as one buffer.

Each table is a pydantic model: every key of every table is checked and an unknown one is
refused; a number is an integer or a finite float as the key says, never a boolean or a
string. A declaration that does not fit raises one :class:`WorkflowError` naming the source,
the table, the key and what is allowed (``workflow mnist.toml [model.training.schedule]:
'kind' is 'linear', allowed: constant, cosine, step``).

Part of the contract both sides of the Airflow/Spark line import (:mod:`ml_contract`): the
DAG files parse every declaration with :func:`parse_workflow` when they are imported, so a
bad declaration is a DAG import error naming the key, and the jobs parse the same way
(``spark_jobs.workflows.load``). It imports neither Airflow, Spark nor torch.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Annotated, Any, Literal, Self, TypeVar, get_args, get_origin

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    WrapValidator,
    field_validator,
    model_validator,
)
from pydantic.dataclasses import dataclass as checked_dataclass
from pydantic.fields import FieldInfo
from pydantic_core import PydanticCustomError

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
    "ROW_SUMMARIES",
    "SCHEDULES",
    "TRAINING_KEYS",
    "FeatureColumn",
    "Label",
    "Metric",
    "Model",
    "Monitoring",
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

Direction = Literal["max", "min"]
Loss = Literal["nll", "mse"]
MetricName = Literal["accuracy", "rmse"]
OutputKind = Literal["class_probabilities", "regression"]
FeatureDtype = Literal["uint8", "float32"]
LabelDtype = Literal["int32", "float32"]
Optimizer = Literal["sgd", "adam", "adamw"]
ScheduleKind = Literal["constant", "cosine", "step"]
# The row summaries a tensor layout's drift check compares (spark_jobs.drift computes them).
RowSummary = Literal["mean", "std", "nonzero"]

DIRECTIONS: tuple[str, ...] = get_args(Direction)
LOSSES: tuple[str, ...] = get_args(Loss)
METRICS: tuple[str, ...] = get_args(MetricName)
OUTPUT_KINDS: tuple[str, ...] = get_args(OutputKind)
FEATURE_DTYPES: tuple[str, ...] = get_args(FeatureDtype)
LABEL_DTYPES: tuple[str, ...] = get_args(LabelDtype)
OPTIMIZERS: tuple[str, ...] = get_args(Optimizer)
SCHEDULES: tuple[str, ...] = get_args(ScheduleKind)
ROW_SUMMARIES: tuple[str, ...] = get_args(RowSummary)
# The values each feature dtype holds (numpy's iinfo/finfo), written out so that parsing a
# declaration, which every DAG file does, needs no numpy (a quarter of a second per parse).
DTYPE_LIMITS = {"uint8": (0, 255), "float32": (-3.4028234663852886e38, 3.4028234663852886e38)}


class WorkflowError(ValueError):
    """A workflow declaration is missing, malformed or inconsistent."""


def _as_written(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    """A number checked as a float, kept as written: an integer stays one (``0..255``)."""
    checked = handler(value)
    return value if type(value) is int else checked


def _csv_field_name(name: str) -> str:
    if not re.fullmatch(FIELD_NAME, name):
        raise ValueError(
            f"name {name!r} is not a CSV field name: letters, digits and '_', not starting "
            "with a digit (a header naming it could not be told from a row)"
        )
    return name


def _as_a_whole(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    """A list checked as one value: a bad item refuses the list (``'betas' is [0.9]``)."""
    try:
        return handler(value)
    except ValidationError:
        raise PydanticCustomError("list_refused", "the list is not allowed") from None


# Scalars are strict (StrictInt, StrictFloat, StrictStr: a boolean is no number, a string no
# number); containers are not, so that TOML arrays arrive as the tuples declared.
Number = Annotated[StrictFloat, WrapValidator(_as_written)]
FieldName = Annotated[StrictStr, AfterValidator(_csv_field_name)]
Shape = Annotated[
    tuple[Annotated[StrictInt, Field(gt=0)], ...],
    Field(min_length=1, description="a list of positive integers"),
    WrapValidator(_as_a_whole),
]
Beta = Annotated[StrictFloat, Field(ge=0, lt=1)]
Betas = Annotated[tuple[Beta, Beta], Field(description="two numbers >= 0 and < 1"), WrapValidator(_as_a_whole)]

# Every table: no key but the declared ones, no NaN or infinity. Built when first used.
_CHECKS = ConfigDict(extra="forbid", allow_inf_nan=False, defer_build=True)


class _Table(BaseModel):
    """A table of the declaration as TOML holds it."""

    model_config = ConfigDict(**_CHECKS, frozen=True)


@checked_dataclass(frozen=True, config=_CHECKS)
class Label:
    """``[dataset] label``: the target, the raw rows' first field."""

    name: FieldName
    dtype: LabelDtype
    min: Number
    max: Number


@checked_dataclass(frozen=True, config=_CHECKS)
class FeatureColumn:
    """One element of the feature tensor: its raw field name and allowed range."""

    name: FieldName
    min: Number
    max: Number


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


@dataclass(frozen=True)
class Training:
    """``[model.training]`` flat, as the training loop reads it (the keys and their defaults:
    the module docstring; built by :func:`parse_training`)."""

    epochs: int
    learning_rate: float
    batch_size: int
    optimizer: str
    momentum: float
    betas: tuple[float, float]
    weight_decay: float
    clip_grad_norm: float
    warmup_epochs: float
    schedule: str
    step_epochs: int
    gamma: float
    early_stopping_patience: int
    early_stopping_min_delta: float
    divergence_factor: float
    divergence_patience: int


@dataclass(frozen=True)
class Model:
    factory: str
    loss: str
    training: Training
    registered_name: str


@checked_dataclass(frozen=True, config=_CHECKS)
class Metric:
    name: MetricName
    direction: Direction

    def better(self, a: float, b: float) -> bool:
        """Whether ``a`` is strictly better than ``b``."""
        return a > b if self.direction == "max" else a < b


@checked_dataclass(frozen=True, config=_CHECKS)
class Promotion:
    floor: StrictFloat
    tolerance: StrictFloat


@checked_dataclass(frozen=True, config=_CHECKS)
class Output:
    """``class_probabilities``: ``prediction`` (int, the argmax class) and ``prob_<c>``
    (double) for each of ``classes``; ``regression``: ``prediction`` (double)."""

    kind: OutputKind
    classes: StrictInt = 0

    @property
    def is_classifier(self) -> bool:
        return self.kind == "class_probabilities"

    @property
    def columns(self) -> list[str]:
        """The output columns a scored row carries, in order."""
        return ["prediction", *[f"prob_{c}" for c in range(self.classes)]]

    @model_validator(mode="after")
    def _classes_of_a_classifier(self) -> Self:
        if self.classes and not self.is_classifier:
            raise ValueError(f"'classes' applies to kind 'class_probabilities' only, not {self.kind!r}")
        return self


@dataclass(frozen=True)
class Monitoring:
    """``[monitoring]`` with its defaults resolved (the keys: the module docstring).

    ``statistics`` are the names the drift check compares: tabular column names, or tensor
    row summaries (:data:`ROW_SUMMARIES`). ``retrain_window_days`` None: the nightly's window.
    """

    drift: bool
    false_alarm_rate: float
    statistics: tuple[str, ...]
    tolerance: float
    min_labels: int
    retrain_window_days: int | None
    cooldown_days: int
    shadow: bool


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
    monitoring: Monitoring

    @property
    def raw_fields(self) -> list[str]:
        """The raw CSV's fields in order: the label, then the features' fields."""
        return [self.label.name, *self.features.raw_fields]


class _Dataset(_Table):
    raw_format: Literal["csv"]
    sample: StrictStr | None = None
    label: Label


class _Layout(_Table):
    """``[features]``, either layout: its columns' names are unique and each range is ordered
    and within the dtype's values."""

    dtype: FeatureDtype

    @cached_property
    def features(self) -> TensorFeatures:
        raise NotImplementedError

    @model_validator(mode="after")
    def _columns_fit(self) -> Self:
        columns = self.features.columns
        repeated = sorted(name for name, count in Counter(c.name for c in columns).items() if count > 1)
        if repeated:
            raise ValueError(f"column names repeat: {', '.join(map(repr, repeated))}")
        low, high = DTYPE_LIMITS[self.dtype]
        for column in columns:
            if not low <= column.min <= column.max <= high:
                raise ValueError(f"{column.name} range {column.min}..{column.max} must be ordered and fit {self.dtype}")
        return self


class _TensorLayout(_Layout):
    layout: Literal["tensor"]
    shape: Shape
    min: Number
    max: Number
    raw_field_prefix: FieldName

    @cached_property
    def features(self) -> TensorFeatures:
        prefix, low, high = self.raw_field_prefix, self.min, self.max
        columns = tuple(FeatureColumn(f"{prefix}{i}", low, high) for i in range(math.prod(self.shape)))
        return TensorFeatures(layout=self.layout, shape=self.shape, dtype=self.dtype, columns=columns)


class _TabularLayout(_Layout):
    layout: Literal["tabular"]
    columns: tuple[FeatureColumn, ...] = Field(min_length=1, description="at least one column {name, min, max}")

    @cached_property
    def features(self) -> TensorFeatures:
        return TensorFeatures(layout=self.layout, shape=(len(self.columns),), dtype=self.dtype, columns=self.columns)


class _Schedule(_Table):
    """``[model.training.schedule]`` (``warmup_epochs`` below the epochs: checked with them)."""

    kind: ScheduleKind = "constant"
    warmup_epochs: Number = Field(0.0, ge=0)
    step_epochs: StrictInt = Field(1, ge=1)
    gamma: StrictFloat = Field(0.1, gt=0, le=1)

    @model_validator(mode="after")
    def _step_keys(self) -> Self:
        """``step_epochs`` and ``gamma``: both for kind ``step``, neither for another."""
        given = [key for key in ("step_epochs", "gamma") if key in self.model_fields_set]
        if self.kind != "step" and given:
            raise ValueError(f"'step_epochs' and 'gamma' apply to kind 'step' only, not {self.kind!r}")
        if self.kind == "step" and len(given) < 2:
            raise ValueError(_missing("gamma" if given == ["step_epochs"] else "step_epochs"))
        return self


class _EarlyStopping(_Table):
    patience: StrictInt = Field(ge=1)
    min_delta: StrictFloat = Field(0.0, ge=0)


class _Divergence(_Table):
    factor: StrictFloat = Field(4.0, gt=1)
    patience: StrictInt = Field(2, ge=1)


class _TrainingTable(_Table):
    """``[model.training]`` and its sub-tables, as TOML holds them."""

    epochs: StrictInt = Field(ge=1, le=1000)
    learning_rate: StrictFloat = Field(gt=0, le=10)
    batch_size: StrictInt = Field(ge=1, le=65536)
    optimizer: Optimizer = "sgd"
    momentum: StrictFloat = Field(0.0, ge=0, lt=1)
    betas: Betas = (0.9, 0.999)
    weight_decay: StrictFloat = Field(0.0, ge=0)
    clip_grad_norm: StrictFloat = Field(0.0, ge=0)
    schedule: _Schedule = _Schedule.model_construct()  # an absent table: its defaults
    early_stopping: _EarlyStopping | None = None
    divergence: _Divergence = _Divergence.model_construct()

    @field_validator("schedule")
    @classmethod
    def _warm_up_within_the_epochs(cls, schedule: _Schedule, info: ValidationInfo) -> _Schedule:
        epochs = info.data.get("epochs")  # absent when refused itself
        if epochs is not None and schedule.warmup_epochs >= epochs:
            raise ValueError(_refused("warmup_epochs", schedule.warmup_epochs, f">= 0 and < {epochs}"))
        return schedule

    @model_validator(mode="after")
    def _optimizer_keys(self) -> Self:
        """``momentum`` is SGD's, ``betas`` Adam's and AdamW's."""
        if "momentum" in self.model_fields_set and self.optimizer != "sgd":
            raise ValueError(f"'momentum' applies to optimizer 'sgd' only, not {self.optimizer!r} (see 'betas')")
        if "betas" in self.model_fields_set and self.optimizer == "sgd":
            raise ValueError("'betas' applies to optimizers 'adam' and 'adamw' only (see 'momentum')")
        return self

    def training(self) -> Training:
        schedule, stopping, divergence = self.schedule, self.early_stopping, self.divergence
        return Training(
            **self.model_dump(exclude={"schedule", "early_stopping", "divergence"}),
            warmup_epochs=float(schedule.warmup_epochs),
            schedule=schedule.kind,
            step_epochs=schedule.step_epochs,
            gamma=schedule.gamma,
            early_stopping_patience=stopping.patience if stopping else 0,
            early_stopping_min_delta=stopping.min_delta if stopping else 0.0,
            divergence_factor=divergence.factor,
            divergence_patience=divergence.patience,
        )


TRAINING_KEYS = tuple(_TrainingTable.model_fields)


class _Monitoring(_Table):
    """``[monitoring]`` as TOML holds it (``statistics`` checked against the features, and the
    defaults that depend on other tables resolved, by the declaration)."""

    drift: StrictBool = True
    false_alarm_rate: StrictFloat = Field(0.01, gt=0, le=0.2)
    statistics: tuple[StrictStr, ...] | None = Field(
        None, min_length=1, description="a non-empty list of names", validate_default=False
    )
    tolerance: StrictFloat | None = Field(None, ge=0)
    min_labels: StrictInt = Field(100, ge=1)
    retrain_window_days: StrictInt | None = Field(None, ge=1, le=90)
    cooldown_days: StrictInt = Field(7, ge=0, le=365)
    shadow: StrictBool = False

    def monitoring(self, features: TensorFeatures, promotion: Promotion) -> Monitoring:
        allowed = ROW_SUMMARIES if features.layout == "tensor" else tuple(features.raw_fields)
        statistics = allowed if self.statistics is None else self.statistics
        return Monitoring(
            drift=self.drift,
            false_alarm_rate=self.false_alarm_rate,
            statistics=tuple(statistics),
            tolerance=promotion.tolerance if self.tolerance is None else self.tolerance,
            min_labels=self.min_labels,
            retrain_window_days=self.retrain_window_days,
            cooldown_days=self.cooldown_days,
            shadow=self.shadow,
        )


class _ModelTable(_Table):
    registered_name: StrictStr | None = None
    factory: StrictStr
    loss: Loss
    training: _TrainingTable


class _Declaration(_Table):
    """The whole declaration, as TOML holds it."""

    name: StrictStr = Field(pattern=NAME.pattern, description=f"a name matching {NAME.pattern}")
    dataset: _Dataset
    features: _TensorLayout | _TabularLayout = Field(discriminator="layout")
    model: _ModelTable
    metric: Metric
    promotion: Promotion
    output: Output
    monitoring: _Monitoring = _Monitoring.model_construct()  # an absent table: its defaults
    description: StrictStr  # last: a missing table is named before it

    @field_validator("monitoring")
    @classmethod
    def _statistics_exist(cls, monitoring: _Monitoring, info: ValidationInfo) -> _Monitoring:
        """``statistics`` name what the layout has: its columns, or the row summaries."""
        layout = info.data.get("features")  # absent when refused itself
        if layout is None or monitoring.statistics is None:
            return monitoring
        features = layout.features
        allowed = ROW_SUMMARIES if features.layout == "tensor" else tuple(features.raw_fields)
        unknown = [name for name in monitoring.statistics if name not in allowed]
        repeated = sorted(name for name, count in Counter(monitoring.statistics).items() if count > 1)
        if unknown or repeated:
            what = f"names {unknown[0]!r}" if unknown else f"repeats {repeated[0]!r}"
            raise ValueError(
                f"'statistics' {what}; allowed for a {features.layout} layout, each once: {', '.join(allowed)}"
            )
        return monitoring

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        """A classifier is trained with ``nll`` on an integer label and measured by accuracy
        (higher is better); a regressor with ``mse`` on a float label, measured by RMSE (lower)."""
        label, output, metric = self.dataset.label, self.output, self.metric
        if output.is_classifier:
            expected = {
                "label dtype": ("int32", label.dtype),
                "loss": ("nll", self.model.loss),
                "metric": ("accuracy", metric.name),
            }
            if output.classes < 2 or label.min != 0 or label.max != output.classes - 1:
                raise ValueError("a classifier needs classes >= 2 and labels 0..classes-1")
        else:
            expected = {
                "label dtype": ("float32", label.dtype),
                "loss": ("mse", self.model.loss),
                "metric": ("rmse", metric.name),
            }
        for what, (want, got) in expected.items():
            if want != got:
                raise ValueError(f"a {output.kind} workflow needs {what} {want!r}, got {got!r}")
        wanted_direction = "max" if metric.name == "accuracy" else "min"
        if metric.direction != wanted_direction:
            raise ValueError(f"metric {metric.name} has direction {wanted_direction!r}, got {metric.direction!r}")
        return self

    def workflow(self) -> Workflow:
        dataset, model = self.dataset, self.model
        return Workflow(
            name=self.name,
            description=self.description,
            raw_format=dataset.raw_format,
            sample=dataset.sample,
            label=dataset.label,
            features=self.features.features,
            model=Model(
                factory=model.factory,
                loss=model.loss,
                training=model.training.training(),
                registered_name=self.name if model.registered_name is None else model.registered_name,
            ),
            metric=self.metric,
            promotion=self.promotion,
            output=self.output,
            monitoring=self.monitoring.monitoring(self.features.features, self.promotion),
        )


def parse_workflow(data: dict, source: str) -> Workflow:
    """A :class:`Workflow` from a parsed TOML document; :class:`WorkflowError` names what is wrong."""
    return _validated(_Declaration, data, source).workflow()


def parse_training(table: dict, source: str) -> Training:
    """``[model.training]`` and its sub-tables as a :class:`Training` (``source`` names the
    table); :class:`WorkflowError` names the key and what is allowed."""
    return _validated(_TrainingTable, table, source).training()


_T = TypeVar("_T", bound=BaseModel)


def _validated(schema: type[_T], data: dict, source: str) -> _T:
    try:
        return schema.model_validate(data)
    except ValidationError as err:
        raise _refusal(err, schema, source) from None


# -- one line per refusal ------------------------------------------------------------------

# What a value of the wrong type should have been, by pydantic's error type.
_TYPES = {
    "int_type": "an integer",
    "float_type": "a number",
    "bool_type": "true or false",
    "string_type": "a string",
    "tuple_type": "a list",
    "model_type": "a table",
    "model_attributes_type": "a table",
    "dataclass_type": "a table",
}
_UNKNOWN_KEY = ("extra_forbidden", "unexpected_keyword_argument")
_BOUNDS = (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<="))


def _missing(key: str) -> str:
    return f"missing key {key!r}"


def _refused(key: str, value: Any, allowed: str) -> str:
    return f"{key!r} is {value!r}, allowed: {allowed}"


def _refusal(error: ValidationError, schema: type[BaseModel], source: str) -> WorkflowError:
    """The first of ``error``'s errors as one line: ``source`` and the table, the key, and
    what it allows (``workflow mnist.toml [model]: 'loss' is 'ce', allowed: nll, mse``)."""
    first = error.errors(include_url=False)[0]
    kind, value, context = first["type"], first["input"], first.get("ctx", {})
    where, table, key, field = _locate(schema, first["loc"])
    tag_key, shapes = _shapes(field)
    if shapes and kind.startswith("union_tag"):  # the key that picks the table's shape
        where = (*where, key)
        message = (
            _missing(tag_key)
            if kind == "union_tag_not_found"
            else _refused(tag_key, value.get(tag_key), ", ".join(shapes))
        )
    elif "error" in context:  # a validator's own check, in its own words
        message = str(context["error"])
        if field is not None and _tables(field.annotation):
            where = (*where, key)
    elif kind in _UNKNOWN_KEY:
        message = f"unknown key {key!r}, allowed: {', '.join(_fields(table))}"
    elif kind in _TYPES:
        message = f"{repr(key) if key else 'it'} must be {_TYPES[kind]}, got {value!r}"
    elif field is None:
        message = first["msg"]
    elif kind == "missing":
        message = f"missing table [{key}]" if _tables(field.annotation) else _missing(key)
    else:
        allowed = _allowed(field) or ("a finite number" if kind == "finite_number" else first["msg"])
        message = _refused(key, value, allowed)
    return WorkflowError(f"{_at(source, where)}: {message}")


def _fields(table: Any) -> dict[str, FieldInfo]:
    return table.__pydantic_fields__


def _tables(annotation: Any) -> list[Any]:
    """The tables a key holds: its model, each of a union's, a list's items'."""
    if hasattr(annotation, "__pydantic_fields__"):
        return [annotation]
    return [table for arg in get_args(annotation) for table in _tables(arg)]


def _shapes(field: FieldInfo | None) -> tuple[str, dict[str, Any]]:
    """For a key holding one of several tables told apart by a key of theirs (``[features]``
    by ``layout``): that key, and each table by its value; else ``("", {})``."""
    if field is None or not isinstance(field.discriminator, str):
        return "", {}
    tag_key = field.discriminator
    return tag_key, {tag: t for t in _tables(field.annotation) for tag in get_args(_fields(t)[tag_key].annotation)}


def _allowed(field: FieldInfo) -> str:
    """What a key allows, from its declaration: a description, its choices or its bounds."""
    if field.description:
        return field.description
    if get_origin(field.annotation) is Literal:
        return ", ".join(get_args(field.annotation))
    bounds = [f"{sign} {getattr(m, name)}" for m in field.metadata for name, sign in _BOUNDS if hasattr(m, name)]
    return " and ".join(bounds)


def _locate(
    table: Any, loc: tuple[int | str, ...], where: tuple[str, ...] = ()
) -> tuple[tuple[str, ...], Any, str, FieldInfo | None]:
    """Where an error's ``loc`` points: the tables on the way (an item of a list of tables as
    ``columns[3]``), the table it ends in, the key there ("": the table itself) and that
    key's field (None: an unknown key, or the table itself)."""
    if not loc:
        return where, table, "", None
    key, rest = str(loc[0]), loc[1:]
    field = _fields(table).get(key)
    inner = _tables(field.annotation) if field is not None else []
    if not rest or not inner:
        return where, table, key, field
    step = rest[0]
    if isinstance(step, int):  # an item of a list of tables
        if len(rest) == 1:
            return where, table, f"{key}[{step}]", field
        return _locate(inner[0], rest[1:], (*where, f"{key}[{step}]"))
    shapes = _shapes(field)[1]
    if step in shapes:  # the shape the table took, by its tag
        return _locate(shapes[step], rest[1:], (*where, key))
    return _locate(inner[0], rest, (*where, key))


def _at(source: str, where: tuple[str, ...]) -> str:
    """``source`` with the table ``where`` names: ``workflow x.toml [model.training]``,
    ``workflow x.toml [features] columns[3]``; a ``source`` naming a table already
    (``... [model.training]``) gets the sub-table's full name."""
    tables = ".".join(part for part in where if not part.endswith("]"))
    items = [part for part in where if part.endswith("]")]
    if tables:
        source = f"{source[:-1]}.{tables}]" if source.endswith("]") else f"{source} [{tables}]"
    return " ".join([source, *items])
