"""Measurements that need a GPU: one process per script, most important first, within a time budget."""
