"""Measurements that run on a CPU (some also take ``--device cuda``): speed, memory and accuracy of parts of the package."""
