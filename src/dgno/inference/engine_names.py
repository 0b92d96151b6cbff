"""The names of the inference engines (``dgno.inference.engines``) and export formats, without importing torch.

The command line and the workflow's config check an engine name before any network is loaded.
"""

from __future__ import annotations

from typing import Literal

EngineName = Literal["auto", "eager", "native", "onnxruntime"]
ENGINES: tuple[str, ...] = ("auto", "eager", "native", "onnxruntime")
# What ``dgno export`` writes: the two network files (dgno.inference.export) and a bioimage.io model package.
EXPORT_FORMATS: tuple[str, ...] = ("torchscript", "onnx", "bioimageio")
