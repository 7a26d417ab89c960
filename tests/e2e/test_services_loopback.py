"""The scheduler-driven platform (API server, scheduler, DAG processor of
``airflow_services``) listens on loopback only: Airflow's log server, which its
scheduler would start on all interfaces (0.0.0.0 and [::], port 8793), included.
Samples the services this session already runs; the nightly's own listeners are
checked in test_nightly_retrain. Their metadata DB, the embedded PostgreSQL the tests start,
listens on no TCP port at all: they reach it through its Unix socket."""

from __future__ import annotations

import psutil

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


def test_the_metadata_database_is_reached_through_a_unix_socket_only(airflow_services, postgres_server):
    conn = airflow_services.env()["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
    socket_dir = postgres_server.uri.split("?host=", 1)[1]
    assert conn.startswith("postgresql+psycopg2://postgres@/") and conn.endswith(f"?host={socket_dir}"), conn
    postgres = psutil.Process(postgres_server.pid())  # from the postmaster.pid of its folder
    assert [c for c in postgres.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN] == []
