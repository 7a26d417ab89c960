"""Shared configuration and task factories for the DAGs in this folder (not a DAG file)."""
