"""The model-registry gate: decide once which model version a run may score with, and pin it."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn, overload

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from ml_registry.alias_history import history_tag, read_history, version_as_of
from ml_registry.hooks import MlflowRegistryHook
from ml_registry.links import MlflowModelVersionLink, model_version_url
from ml_registry.signatures import signature_problems
from ml_registry.triggers import PENDING, ModelVersionReadyTrigger

if TYPE_CHECKING:
    from airflow.sdk import Context
    from mlflow import MlflowClient
    from mlflow.entities.model_registry import ModelVersion, RegisteredModel

POLICIES = ("current", "as_of")
READY = "READY"


class ModelRegistryGateOperator(BaseOperator):
    """
    Resolve a registered model's alias (or an explicit version) once, check it, and pin it.

    Returns (XCom ``return_value``) the pinned version, which downstream tasks use instead
    of the alias, so the alias moving mid-run does not change what the run scores::

        {"name": "mnist", "version": "7", "uri": "models:/mnist/7", "run_id": "...",
         "source": "models:/m-...", "alias": "champion", "selected_by": "alias:champion",
         "ui_url": "http://127.0.0.1:5000"}

    No eligible model (no such model, alias or version, not ``READY``, a failed check) raises
    ``AirflowFailException`` (no retries); with ``skip_if_no_model``, a registered model or
    alias that does not exist yet raises ``AirflowSkipException`` instead.
    An unreachable tracking server raises ``MlflowServerUnavailableError`` (retried).

    From the task context only ``logical_date`` and ``dag_run.run_after`` are read: the
    default ``as_of`` time and the time ``max_age`` is measured at (``run_after`` when the
    run has no logical date).

    :param model_name: Registered model name. (templated)
    :param alias: Alias to resolve, e.g. ``champion``; ignored when ``version`` is given. (templated)
    :param version: Explicit version to pin instead of resolving an alias; ``None`` or an
        empty string means "use the alias". (templated)
    :param policy: ``current``: the version the alias points to now; ``as_of``: the version
        that answered for the alias at ``as_of``, read from the promotion history the register
        job records in registered-model tags ``<alias>_history.*`` (see
        ``ml_registry.alias_history``). (templated)
    :param as_of: ISO-8601 date or timestamp for ``policy="as_of"`` (a date means 00:00 UTC,
        a timestamp without offset means UTC); defaults to the run's logical date. To re-score
        day D as it was first scored, pass the logical time of the run that first scored it
        (for the nightly, D+1 02:00 UTC). (templated)
    :param min_version: Refuse versions below this number.
    :param required_tags: Version tags that must be present with these values, e.g.
        ``{"validation_status": "passed"}``.
    :param max_age: Refuse versions registered longer than this before the run's logical date
        (before ``as_of`` under the ``as_of`` policy).
    :param wait_for_ready_timeout: Seconds to wait while the version is
        ``PENDING_REGISTRATION``; 0 refuses it at once. The wait is deferred to the
        triggerer (:class:`ml_registry.triggers.ModelVersionReadyTrigger`): no worker slot is
        held, and the run resumes with the same version, checked again.
    :param poke_interval: Seconds between status checks while waiting.
    :param expected_schema: What the scored data holds, checked against the model's input
        signature (``ml_registry.signatures``). For a tensor-based signature, the tensor's
        dtype and shape per row, e.g. ``{"features": {"dtype": "uint8", "shape": [28, 28]}}``;
        for a column-based one, columns and MLflow type names, e.g. ``{"pixel0": "integer"}``
        (every input column there with the same or a safely widening type).
    :param dataset_path: Parquet dataset or partition directory the run will score, checked
        from its file footers only (no data read): for a tensor model, its ``features``
        column must be binary with ``ml_tensor`` metadata of the model's dtype and shape;
        for a column model, its columns like ``expected_schema``. (templated)
    :param skip_if_no_model: Skip (and so skip downstream scoring) instead of failing when
        the registered model or the alias does not exist yet, e.g. the first nightly runs
        before any champion exists. Every other refusal (a failed check, a version not
        ``READY``, no version at ``as_of``) still fails.
    :param mlflow_conn_id: Airflow connection of the MLflow tracking server.
    """

    template_fields: Sequence[str] = ("model_name", "alias", "version", "policy", "as_of", "dataset_path")
    operator_extra_links = (MlflowModelVersionLink(),)
    ui_color = "#e8f4ea"

    def __init__(
        self,
        *,
        model_name: str,
        alias: str | None = "champion",
        version: str | int | None = None,
        policy: str = "current",
        as_of: str | dt.datetime | None = None,
        min_version: int | None = None,
        required_tags: dict[str, str] | None = None,
        max_age: dt.timedelta | None = None,
        wait_for_ready_timeout: float = 0,
        poke_interval: float = 10,
        expected_schema: dict[str, Any] | None = None,
        dataset_path: str | None = None,
        skip_if_no_model: bool = False,
        mlflow_conn_id: str = MlflowRegistryHook.default_conn_name,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.model_name = model_name
        self.alias = alias
        self.version = version
        self.policy = policy
        self.as_of = as_of
        self.min_version = min_version
        self.required_tags = required_tags
        self.max_age = max_age
        self.wait_for_ready_timeout = wait_for_ready_timeout
        self.poke_interval = poke_interval
        self.expected_schema = expected_schema
        self.dataset_path = dataset_path
        self.skip_if_no_model = skip_if_no_model
        self.mlflow_conn_id = mlflow_conn_id

    def execute(self, context: Context) -> dict[str, str | None]:
        explicit_version = self._explicit_version()
        as_of = self._as_of(context)
        hook = MlflowRegistryHook(mlflow_conn_id=self.mlflow_conn_id)
        client = hook.get_conn()
        with hook.unavailable_as_retryable(f"resolving model {self.model_name!r}"):
            registered = self._registered_model(client)
            if explicit_version is not None:
                version, selected_by, alias = explicit_version, "version", None
            elif as_of is not None:
                version = self._version_as_of(registered, as_of)
                selected_by, alias = f"as_of:{self.alias}@{as_of.isoformat()}", self.alias
            else:
                version = self._version_by_alias(registered)
                selected_by, alias = f"alias:{self.alias}", self.alias
            model_version = self._model_version(client, version, selected_by)
        if model_version.status == PENDING and self.wait_for_ready_timeout > 0:
            # Still registering: wait in the triggerer (no worker slot held), then go on with
            # this version: the alias is never read again.
            waiting = self.wait_for_ready_timeout
            self.log.info("%s version %s is %s; deferring up to %ss", self.model_name, version, PENDING, waiting)
            self.defer(
                trigger=ModelVersionReadyTrigger(
                    mlflow_conn_id=self.mlflow_conn_id,
                    model_name=self.model_name,
                    version=version,
                    poke_interval=self.poke_interval,
                    timeout=self.wait_for_ready_timeout,
                ),
                method_name="execute_complete",
                kwargs={"version": version, "selected_by": selected_by, "alias": alias},
            )
        return self._pin(context, hook, model_version, selected_by, alias, waited=None)

    def execute_complete(
        self, context: Context, event: dict[str, Any], version: str, selected_by: str, alias: str | None
    ) -> dict[str, str | None]:
        """Resume after :class:`ModelVersionReadyTrigger` fired: check the same version again."""
        hook = MlflowRegistryHook(mlflow_conn_id=self.mlflow_conn_id)
        client = hook.get_conn()
        with hook.unavailable_as_retryable(f"checking model {self.model_name!r} version {version}"):
            model_version = self._model_version(client, version, selected_by)
        return self._pin(context, hook, model_version, selected_by, alias, waited=event.get("waited_s"))

    def _as_of(self, context: Context) -> dt.datetime | None:
        """The time the ``as_of`` policy resolves at; None under ``current`` or a version."""
        if self._explicit_version() is None and self.policy == "as_of":
            return self._as_of_time(context.get("logical_date"))
        return None

    def _pin(
        self,
        context: Context,
        hook: MlflowRegistryHook,
        model_version: ModelVersion,
        selected_by: str,
        alias: str | None,
        waited: float | None,
    ) -> dict[str, str | None]:
        """Check the selected version (READY, every rule) and return it pinned."""
        if model_version.status != READY:
            after = f" after waiting {self.wait_for_ready_timeout}s" if waited is not None else ""
            self._refuse(
                model_version.version, f"status is {model_version.status}{after}, only {READY} versions may be used"
            )
        # max_age is measured at the time the run stands for: its logical date, else when it
        # was queued (asset-triggered runs). Never the wall clock: a retry or a late worker
        # would see a different answer than the run it belongs to.
        run_after = getattr(context.get("dag_run"), "run_after", None)
        reference_time = self._as_of(context) or _as_utc(context.get("logical_date")) or _as_utc(run_after)
        with hook.unavailable_as_retryable(f"checking model {self.model_name!r} version {model_version.version}"):
            problems = self._check(model_version, reference_time)
        if problems:
            self._refuse(model_version.version, "; ".join(problems))

        version = str(model_version.version)
        pinned = {
            "name": self.model_name,
            "version": version,
            "uri": f"models:/{self.model_name}/{model_version.version}",
            "run_id": model_version.run_id,
            "source": model_version.source,
            "alias": alias,
            "selected_by": selected_by,
            "ui_url": hook.ui_url,
        }
        link = model_version_url(hook.ui_url, self.model_name, version)
        self.log.info("Pinned %s (%s): %s", pinned["uri"], selected_by, link)
        return pinned

    # -- parameters ---------------------------------------------------------------------

    def _explicit_version(self) -> str | None:
        """The explicit version to pin, or None to resolve the alias; bad parameters fail."""
        if self.policy not in POLICIES:
            raise AirflowFailException(
                f"model {self.model_name!r}: policy must be one of {', '.join(POLICIES)}, got {self.policy!r}"
            )
        if self.version is None or str(self.version).strip() == "":
            if not self.alias:
                raise AirflowFailException(f"model {self.model_name!r}: give either an alias or a version")
            return None
        version = str(self.version).strip()
        if not version.isdigit() or int(version) < 1:
            raise AirflowFailException(
                f"model {self.model_name!r}: version must be a positive integer, got {self.version!r}"
            )
        if self.policy == "as_of":
            raise AirflowFailException(
                f"model {self.model_name!r}: an explicit version ({version}) and policy 'as_of' exclude each other"
            )
        return str(int(version))

    def _as_of_time(self, logical_date: dt.datetime | None) -> dt.datetime:
        if self.as_of is None or (isinstance(self.as_of, str) and not self.as_of.strip()):
            if logical_date is None:
                raise AirflowFailException(
                    f"model {self.model_name!r}: policy 'as_of' needs as_of or a run with a logical date"
                )
            return _as_utc(logical_date)
        if isinstance(self.as_of, dt.datetime):
            return _as_utc(self.as_of)
        try:
            parsed = dt.datetime.fromisoformat(str(self.as_of).strip())
        except ValueError as err:
            raise AirflowFailException(
                f"model {self.model_name!r}: as_of {self.as_of!r} is not an ISO-8601 date or timestamp"
            ) from err
        return _as_utc(parsed)

    # -- selection ----------------------------------------------------------------------

    def _registered_model(self, client: MlflowClient) -> RegisteredModel:
        from mlflow.exceptions import RestException

        try:
            return client.get_registered_model(self.model_name)
        except RestException as err:
            if err.error_code != "RESOURCE_DOES_NOT_EXIST":
                raise
            self._refuse(None, f"registered model does not exist in {client.tracking_uri}", no_model=True)

    def _version_by_alias(self, registered: RegisteredModel) -> str:
        # The alias is read from the registered model (one call, one answer) and never used
        # again: everything after this works on the version number.
        aliases = dict(registered.aliases or {})
        if self.alias not in aliases:
            known = ", ".join(f"{name}->{version}" for name, version in sorted(aliases.items())) or "none"
            self._refuse(
                None,
                f"alias {self.alias!r} is not set (aliases: {known}); promote a version to {self.alias!r} first",
                no_model=True,
            )
        return str(aliases[self.alias])

    def _version_as_of(self, registered: RegisteredModel, as_of: dt.datetime) -> str:
        alias = self.alias
        assert alias  # _explicit_version() refused a run with neither an alias nor a version
        tag = history_tag(alias)
        alias_version = (registered.aliases or {}).get(alias)
        try:
            history = read_history(registered.tags, alias, alias_version)
        except ValueError as err:
            raise AirflowFailException(f"model {self.model_name!r}: promotion history is unreadable: {err}") from err
        version = version_as_of(history, as_of)
        if version is None:
            if not history:
                why = f"no promotion history recorded in registered-model tags {tag!r} or {tag + '.*'!r}"
            else:
                first = history[0]
                why = (
                    f"the first recorded promotion (version {first.version}) is effective from "
                    f"{first.effective.isoformat()}"
                )
            self._refuse(None, f"no version held alias {self.alias!r} at {as_of.isoformat()}: {why}")
        return version

    def _model_version(self, client: MlflowClient, version: str, selected_by: str) -> ModelVersion:
        from mlflow.exceptions import RestException

        try:
            return client.get_model_version(self.model_name, version)
        except RestException as err:
            if err.error_code != "RESOURCE_DOES_NOT_EXIST":
                raise
            self._refuse(version, f"version does not exist (selected by {selected_by})")

    # -- checks -------------------------------------------------------------------------

    def _check(self, model_version: ModelVersion, reference_time: dt.datetime | None) -> list[str]:
        """Every rule the version breaks, so one failure reports them all."""
        problems = []
        if self.min_version is not None and int(model_version.version) < self.min_version:
            problems.append(f"min_version: version {model_version.version} is below {self.min_version}")
        tags = model_version.tags or {}
        for key, wanted in (self.required_tags or {}).items():
            if key not in tags:
                problems.append(f"required_tags: tag {key!r} is missing (required {wanted!r})")
            elif tags[key] != str(wanted):
                problems.append(f"required_tags: tag {key!r} is {tags[key]!r}, required {wanted!r}")
        if self.max_age is not None and reference_time is None:
            problems.append("max_age: the run has neither a logical date nor run_after to measure the age at")
        elif self.max_age is not None and reference_time is not None:
            registered_at = dt.datetime.fromtimestamp(model_version.creation_timestamp / 1000, dt.UTC)
            age = reference_time - registered_at
            if age > self.max_age:
                problems.append(
                    f"max_age: registered {registered_at.isoformat()}, {age} before {reference_time.isoformat()}, "
                    f"more than {self.max_age}"
                )
        if self.expected_schema is not None or self.dataset_path:
            problems.extend(self._signature_problems(model_version))
        return problems

    def _signature_problems(self, model_version: ModelVersion) -> list[str]:
        from mlflow.models import get_model_info

        # A pinned models:/<name>/<version> URI: get_model_info fails on alias URIs.
        signature = get_model_info(f"models:/{self.model_name}/{model_version.version}").signature
        return signature_problems(signature, expected_schema=self.expected_schema, dataset_path=self.dataset_path)

    def _refuse(self, version: str | None, rule: str, *, no_model: bool = False) -> NoReturn:
        """Fail; skip instead when nothing is registered yet and ``skip_if_no_model`` says so."""
        subject = f"model {self.model_name!r}" + (f" version {version}" if version is not None else "")
        message = f"{subject} is not eligible: {rule}"
        if no_model and self.skip_if_no_model:
            raise AirflowSkipException(f"{message} (skip_if_no_model: skipping)")
        raise AirflowFailException(message)


@overload
def _as_utc(value: dt.datetime) -> dt.datetime: ...
@overload
def _as_utc(value: dt.datetime | None) -> dt.datetime | None: ...
def _as_utc(value: dt.datetime | None) -> dt.datetime | None:
    if value is None:
        return None
    if value.tzinfo is None or value.utcoffset() is None:
        value = value.replace(tzinfo=dt.UTC)
    # A plain UTC datetime, so selected_by reads the same whatever zone or class (pendulum)
    # the logical date or as_of came in.
    utc = value.astimezone(dt.UTC)
    return dt.datetime(utc.year, utc.month, utc.day, utc.hour, utc.minute, utc.second, utc.microsecond, tzinfo=dt.UTC)
