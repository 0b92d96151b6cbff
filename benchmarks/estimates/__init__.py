"""Estimates computed from recorded results, a dry run or a CPU profile; nothing here times the real thing."""
