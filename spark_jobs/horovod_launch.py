"""``horovod.spark.run`` that keeps every Horovod socket on loopback when Spark is, and
launches faster: without Horovod's 3 s wait after the ranks exit and without its forked
Gloo checks (:func:`command_lifetime_counted_from_start`, :func:`gloo_built_in_process`).

Horovod 0.28.1 binds the services of a Spark run to all interfaces: the driver service
(in the Spark driver), a task service in every Spark task and the Gloo rendezvous server
all listen on ``('', port)`` (``horovod.runner.util.network.find_port``), and it has no
setting to change that. Its ``nics`` argument only chooses the addresses the services
advertise and the interface Gloo's rank-to-rank connections use
(``HOROVOD_GLOO_IFACE``).

When the Spark driver itself is bound to a loopback address (the embedded stack sets
``SPARK_LOCAL_IP=127.0.0.1``), every executor runs on this machine, so :func:`run` passes
that loopback interface as ``nics`` and makes the three services bind the driver's
address: in the driver for the run's duration, and in each Spark task around Horovod's
own task function. Elsewhere (a cluster, where ranks on other hosts must reach each other)
Horovod's defaults stay; restrict it with ``nics`` and the network instead.
"""

from __future__ import annotations

import contextlib
import importlib
import ipaddress
import logging
import socket
from collections.abc import Callable, Iterator
from typing import Any

from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

# The modules that call find_port, each through its own imported name.
_SERVER_MODULES = ("horovod.runner.common.util.network", "horovod.runner.http.http_server")


def loopback_bind_address(spark: SparkSession) -> str | None:
    """The IPv4 address the Spark driver binds to when it is a loopback one, else None.

    Spark binds ``spark.driver.bindAddress``, by default ``spark.driver.host``, which is a
    host name as often as an address (``localhost`` with ``SPARK_LOCAL_IP=127.0.0.1``).
    Horovod's services speak IPv4 only.
    """
    conf = spark.sparkContext.getConf()
    host = conf.get("spark.driver.bindAddress") or conf.get("spark.driver.host")
    if not host:
        return None
    try:
        # An AF_INET sockaddr is (address, port): str() only narrows typeshed's union of sockaddrs.
        addresses = {str(info[4][0]) for info in socket.getaddrinfo(host, None, socket.AF_INET)}
    except socket.gaierror:
        return None
    if addresses and all(ipaddress.ip_address(a).is_loopback for a in addresses):
        return "127.0.0.1" if "127.0.0.1" in addresses else sorted(addresses)[0]
    return None


def interface_of(address: str) -> str:
    """The network interface that holds ``address`` (``lo`` for 127.0.0.1 on Linux)."""
    import psutil

    for name, addresses in psutil.net_if_addrs().items():
        if any(a.address == address for a in addresses):
            return name
    raise RuntimeError(f"no network interface holds {address}")


@contextlib.contextmanager
def services_bound_to(host: str) -> Iterator[None]:
    """Within the block, the Horovod services this process starts listen on ``host`` only."""
    modules: list[Any] = [importlib.import_module(name) for name in _SERVER_MODULES]  # find_port is set on them
    originals = [module.find_port for module in modules]
    # Horovod's own search for a free port, each try bound to ``host`` instead of ''.
    search = originals[0]

    def find_port(server_factory: Callable[[tuple[str, int]], Any]):
        return search(lambda addr: server_factory((host, addr[1])))

    for module in modules:
        module.find_port = find_port
    try:
        yield
    finally:
        for module, original in zip(modules, originals, strict=False):
            module.find_port = original


def command_lifetime_counted_from_start() -> None:
    """Make a Spark task's task service count its minimum command lifetime from the command's
    start, as its docstring says, not from its end.

    Horovod 0.28.1 keeps each Spark task alive for at least 3 s "after the command started"
    (``MINIMUM_COMMAND_LIFETIME_S``, so that the driver can still connect to ask for the exit
    code of a short command), but ``SparkTaskService._run_command`` starts that timer once the
    command has *ended*: every Gloo run then waits 3 s after its ranks exit before
    ``horovod.spark.run`` returns, whatever the ranks did. Here the timer starts before the
    command runs; a command shorter than 3 s still keeps its task that long. Idempotent
    (Spark reuses a worker process for later tasks)."""
    from horovod.runner.common.service.task_service import BasicTaskService
    from horovod.runner.common.util import timeout
    from horovod.spark.task.task_service import SparkTaskService

    if getattr(SparkTaskService._run_command, "counted_from_start", False):
        return

    def _run_command(self, command, env, event, *args: Any, **kwargs: Any) -> None:
        if self._minimum_command_lifetime_s is not None:
            self._minimum_command_lifetime = timeout.Timeout(
                self._minimum_command_lifetime_s, message="Just measuring runtime"
            )
        BasicTaskService._run_command(self, command, env, event, *args, **kwargs)

    vars(_run_command)["counted_from_start"] = True  # the marker read above (a function attribute)
    SparkTaskService._run_command = _run_command


def _task_mappers(host: str | None, make_mapper: Callable[..., Callable]) -> Callable[..., Callable]:
    """Horovod's ``_make_mapper`` with each Spark task's command lifetime counted from the
    command's start (:func:`command_lifetime_counted_from_start`) and, given a ``host``,
    its task service bound to it."""

    def make(*args: Any, **kwargs: Any) -> Callable:
        mapper = make_mapper(*args, **kwargs)

        def task_mapper(index, iterator):
            command_lifetime_counted_from_start()
            with services_bound_to(host) if host else contextlib.nullcontext():
                yield from mapper(index, iterator)

        return task_mapper

    return make


def gloo_built_in_process(verbose: bool = False) -> bool:
    """Horovod's ``gloo_built`` answered in this process from its torch extension.

    Horovod's own check forks a child per framework extension (tensorflow, torch, mxnet)
    that imports it, and ``horovod.spark.run`` asks twice (``mpi_built``, then
    ``gloo_built``): about 2 s of the rank launch on 2 cores, spent importing torch in
    children. The driver imports torch anyway (it logs the model), once."""
    import horovod.torch

    return bool(horovod.torch.gloo_built())


def run(
    spark: SparkSession, fn: Callable, *, args: tuple, num_proc: int, env: dict[str, str], verbose: int = 1
) -> list:
    """``horovod.spark.run(fn, args, num_proc=num_proc, env=env, use_gloo=True)`` (the
    project builds Horovod with Gloo, without MPI); on a loopback-bound Spark driver, with
    every Horovod socket on that address; everywhere without Horovod's 3 s wait after the
    ranks exit (:func:`command_lifetime_counted_from_start`) and with its Gloo check made in
    this process (:func:`gloo_built_in_process`). Returns each rank's result."""
    import horovod.runner.launch as launch
    import horovod.spark
    import horovod.spark.runner as spark_runner

    host = loopback_bind_address(spark)
    make_mapper, gloo_built = spark_runner._make_mapper, launch.gloo_built
    spark_runner._make_mapper = _task_mappers(host, make_mapper)
    launch.gloo_built = gloo_built_in_process
    options = {"num_proc": num_proc, "env": env, "verbose": verbose, "use_gloo": True}
    try:
        if host is None:
            return horovod.spark.run(fn, args=args, **options)
        nics = {interface_of(host)}
        log.info("Horovod services and Gloo bound to %s (%s), as the Spark driver is", host, ", ".join(nics))
        with services_bound_to(host):
            return horovod.spark.run(fn, args=args, nics=nics, **options)
    finally:
        spark_runner._make_mapper, launch.gloo_built = make_mapper, gloo_built
