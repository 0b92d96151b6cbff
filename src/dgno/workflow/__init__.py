"""Snakemake-facing logic: config validation, cluster requests, job environment, and the DAG plan.

The rule files (``workflow/rules/*.smk``) stay thin: they call the plain functions here, which take
the validated config explicitly and are unit-tested without Snakemake (``tests/test_workflow_plan.py``).
Building the DAG imports nothing heavy: no torch, no network is built.
"""
