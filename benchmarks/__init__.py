"""Measurements behind the numbers that docs/performance.md and the report quote; run each as a module from the repository root.

``python -m benchmarks.<folder>.<script> ...`` (see benchmarks/README.md); results are recorded under
``benchmarks/results/``.
"""
