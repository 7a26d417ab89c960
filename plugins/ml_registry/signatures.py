"""The gate's signature checks: does the data a run will score fit the model's input signature?

Two kinds of signature:

- **tensor-based** (every workflow's model since workflows: one ``TensorSpec`` named
  ``features``, dtype and shape ``[-1, *shape]``): the scored data's ``features`` column
  must be binary and carry, in its Spark field metadata ``ml_tensor``, the same dtype and
  shape (without the batch dimension). The metadata is read from the Parquet footers, key
  ``org.apache.spark.sql.parquet.row.metadata`` (Spark's schema, written by every Spark
  job and by ``spark_jobs.schema.curated_arrow_table``): no data is read.
- **column-based** (named columns, MLflow types): every required column must be there with
  the same or a safely widening type.

The plugin does not import ``spark_jobs`` (the Airflow side has only ``dags/`` and
``plugins/`` on its path): the metadata key and its footer are the contract's
(:mod:`ml_contract.tensors`, which the jobs' writer uses too), and
``tests/plugins/test_gate.py`` checks partitions written by ``spark_jobs``' own writer. Imports nothing heavy at module
level (the scheduler parses DAG files that import the operator).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow.sdk.exceptions import AirflowFailException

from ml_contract.tensors import FEATURES_COL, TENSOR_METADATA_KEY, footer_tensor_metadata

# Data type -> signature types it may feed without loss, following the conversions
# MLflow's schema enforcement accepts (int32 widens to int64 and float64; float32 to float64).
_WIDENS_TO = {"integer": {"long", "double"}, "float": {"double"}}


def signature_problems(
    signature: Any, *, expected_schema: Mapping[str, Any] | None = None, dataset_path: str | None = None
) -> list[str]:
    """Every way the data (``expected_schema``, the Parquet at ``dataset_path``) does not fit
    ``signature`` (an MLflow ``ModelSignature`` or None), as ``signature: ...`` lines."""
    inputs = signature.inputs if signature is not None else None
    if inputs is None:
        return ["signature: the model has no input signature to check the data against"]
    if inputs.is_tensor_spec():
        return _tensor_problems(inputs.inputs, expected_schema, dataset_path)
    if not inputs.has_input_names():
        return ["signature: the model's input signature names no columns to check the data against"]
    wanted = [(spec.name, _mlflow_type_name(spec.type), spec.required) for spec in inputs.inputs]
    problems = []
    if expected_schema is not None:
        problems += _column_problems(wanted, expected_schema, "expected_schema")
    if dataset_path:
        problems += _column_problems(wanted, parquet_column_types(dataset_path), f"dataset {dataset_path}")
    return problems


# -- tensor signatures ----------------------------------------------------------------------


def _tensor_problems(specs: list, expected_schema: Mapping[str, Any] | None, dataset_path: str | None) -> list[str]:
    if len(specs) != 1:
        return [f"signature: the model takes {len(specs)} tensors; the gate checks models that take one"]
    spec = specs[0]
    name = spec.name or FEATURES_COL
    takes = (spec.type.name, tuple(int(d) for d in spec.shape[1:]))
    model = f"the model takes {_layout(*takes)}"
    problems = []
    if expected_schema is not None:
        problems += _expected_tensor_problems(name, takes, model, expected_schema)
    if dataset_path:
        problems += _dataset_tensor_problems(name, takes, model, dataset_path)
    return problems


def _expected_tensor_problems(name: str, takes: tuple, model: str, expected_schema: Mapping[str, Any]) -> list[str]:
    declared = expected_schema.get(name)
    if declared is None:
        return [f"signature: {model} as {name!r}; expected_schema has no {name!r}"]
    try:
        if not isinstance(declared, Mapping) or not isinstance(declared.get("dtype"), str):
            raise ValueError("no dtype")
        holds = (declared["dtype"], _shape(declared.get("shape")))
    except ValueError as err:
        raise AirflowFailException(
            f"expected_schema[{name!r}] must be {{'dtype': ..., 'shape': [...]}} for a tensor model, "
            f"got {declared!r} ({err})"
        ) from err
    return [] if holds == takes else [f"signature: {model}; expected_schema holds {_layout(*holds)}"]


def _dataset_tensor_problems(name: str, takes: tuple, model: str, path: str) -> list[str]:
    import pyarrow.parquet as pq
    import pyarrow.types as pat

    dataset = _parquet_dataset(path)
    where = f"dataset {path}"
    field = dataset.schema.field(name) if name in dataset.schema.names else None
    if field is None:
        return [f"signature: {model} as {name!r}; {where} has no {name!r} column"]
    if not (pat.is_binary(field.type) or pat.is_large_binary(field.type) or pat.is_fixed_size_binary(field.type)):
        return [f"signature: {model}; {where} holds {name!r} as {field.type}, not as binary tensors"]
    layouts: dict[tuple[str, tuple[int, ...]], str] = {}  # each (dtype, shape) -> the first file holding it
    unlabelled: str | None = None  # the first file without that metadata
    for file in dataset.files:
        layout = _footer_layout(pq.read_schema(file, filesystem=dataset.filesystem), name)
        if layout is not None:
            layouts.setdefault(layout, file)
        elif unlabelled is None:
            unlabelled = file
    if unlabelled is not None:
        return [
            f"signature: {model}; {where} has no {TENSOR_METADATA_KEY!r} metadata on its {name!r} column "
            f"(in {unlabelled}): write it with the curated schema so its dtype and shape are known"
        ]
    if len(layouts) > 1:
        held = ", ".join(_layout(*layout) for layout in layouts)
        return [f"signature: {model}; the files of {where} disagree: they hold {held}"]
    (holds,) = layouts
    return [] if holds == takes else [f"signature: {model}; {where} holds {_layout(*holds)}"]


def _footer_layout(schema: Any, name: str) -> tuple[str, tuple[int, ...]] | None:
    """(dtype, shape) of column ``name`` from a file's Spark row metadata, or None."""
    tensor = footer_tensor_metadata(schema.metadata, name)
    try:
        return None if tensor is None else (str(tensor["dtype"]), _shape(tensor["shape"]))
    except (ValueError, TypeError, KeyError):
        return None


def _shape(value: Any) -> tuple[int, ...]:
    if not isinstance(value, list | tuple) or not all(isinstance(d, int) and not isinstance(d, bool) for d in value):
        raise ValueError(f"shape must be a list of integers, got {value!r}")
    return tuple(value)


def _layout(dtype: str, shape: tuple[int, ...]) -> str:
    return f"{dtype} {list(shape)}"


# -- column signatures ----------------------------------------------------------------------


def _mlflow_type_name(mlflow_type: Any) -> str:
    name = getattr(mlflow_type, "name", None)
    return name if isinstance(name, str) else str(mlflow_type)


def _column_problems(wanted: list[tuple[str, str, bool]], available: Mapping[str, Any], source: str) -> list[str]:
    problems = []
    for column, wanted_type, required in wanted:
        if column not in available:
            if required:
                problems.append(f"signature: input column {column!r} ({wanted_type}) is missing from {source}")
            continue
        have = available[column]
        if have != wanted_type and wanted_type not in _WIDENS_TO.get(have, ()):
            problems.append(f"signature: input column {column!r} is {have} in {source}, the model needs {wanted_type}")
    return problems


def _parquet_dataset(path: str):
    import pyarrow as pa
    import pyarrow.dataset as pads

    try:
        dataset = pads.dataset(path, format="parquet", partitioning="hive")
    except (FileNotFoundError, pa.ArrowInvalid, OSError) as err:
        raise AirflowFailException(f"dataset_path {path!r}: cannot read a Parquet dataset there: {err}") from err
    if not dataset.files:
        raise AirflowFailException(f"dataset_path {path!r}: no Parquet files there")
    return dataset


def parquet_column_types(path: str) -> dict[str, str]:
    """Column -> MLflow type name of a Parquet dataset, from file footers only (no Spark, no data)."""
    return {field.name: _arrow_to_mlflow(field.type) for field in _parquet_dataset(path).schema}


def _arrow_to_mlflow(arrow_type: Any) -> str:
    import pyarrow.types as pat

    if pat.is_int8(arrow_type) or pat.is_int16(arrow_type) or pat.is_int32(arrow_type):
        return "integer"
    if pat.is_int64(arrow_type):
        return "long"
    if pat.is_float16(arrow_type) or pat.is_float32(arrow_type):
        return "float"
    if pat.is_float64(arrow_type):
        return "double"
    if pat.is_boolean(arrow_type):
        return "boolean"
    if pat.is_string(arrow_type) or pat.is_large_string(arrow_type) or pat.is_string_view(arrow_type):
        return "string"
    if pat.is_binary(arrow_type) or pat.is_large_binary(arrow_type) or pat.is_binary_view(arrow_type):
        return "binary"
    if pat.is_timestamp(arrow_type) or pat.is_date(arrow_type):
        return "datetime"
    return str(arrow_type)
