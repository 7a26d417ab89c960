"""The scheduler-driven platform (API server, scheduler, DAG processor of
``airflow_services``) listens on loopback only: Airflow's log server, which its
scheduler would start on all interfaces (0.0.0.0 and [::], port 8793), included.
Samples the services this session already runs; the nightly's own listeners are
checked in test_nightly_retrain."""

from __future__ import annotations

from local_stack import SocketWatch


def test_airflow_services_listen_on_loopback_only(airflow_services):
    stack = airflow_services
    listeners = set()
    for pid in stack.service_pids():
        watch = SocketWatch(root_pid=pid)
        watch.sample()
        listeners |= {(ip, port) for ip, port, _ in watch.listeners}
        assert watch.exposed() == [], f"service {pid} listens beyond loopback"
    # Not vacuous: the API server was seen, on its loopback port.
    assert ("127.0.0.1", stack.api_port) in listeners
