"""Helpers around the benchmarks: building a GPU kernel, printing recorded results as tables."""
