"""How this package's DGNO computes the authors' function, convention by convention.

Kept apart from :mod:`dgno.models.authors` (which needs torch) because the report's protocol
section shows the list, and the report runs without torch.
"""

from __future__ import annotations

# How this package's DGNO computes the authors' function: (convention, the authors' code, the paper's
# text or the plausible alternative whose effect benchmarks/cpu/authors_conventions.py measures).
# Shown in the report's protocol section.
AUTHORS_CONVENTIONS: tuple[tuple[str, str, str], ...] = (
    ("DG / Galerkin layer update", "out = x + W2 GELU(W1 (x + Q K_e))", "alternative: z = x + Q K_e, out = z + MLP(z)"),
    ("shallow input branch (SCM + FAM)", "conv3x3-GELU-conv1x1-GELU-conv3x3-GELU-conv1x1 to the level width, affine InstanceNorm; fused by a 3x3 conv", "alternative: ReLU, raw image concatenated, extra 1x1 mix conv"),
    ("input pyramid", "nearest interpolate(scale_factor=0.5), once for 1/2 and twice for 1/4", "alternative: bilinear"),
    ("per-head LayerNorm of K, V", "(x - mean) / (unbiased std + 1e-5)", "alternative: (x - mean) / sqrt(biased var + 1e-5)"),
    ("Dirichlet boundary", "+F(K_b, 0) added on all four sides; K_b = the boundary element's inner face (Face) or K_vol (Cell)", "paper App. D: -F(0, K) on left/top with the outward face"),
    ("periodic boundary, Face", "wrap F(left face of last column, right face of first column), likewise top/bottom", "alternative: faces swapped"),
    ("ASSM prompt", "added to C in raster token order (C itself in route-sorted order)", "alternative: sorted together with the tokens"),
    ("biases", "no bias in the stem, the 1x1 reduce convs and the full-resolution head; the 1/4 and 1/2 heads have one", "alternative: biases everywhere"),
    ("routing at inference (kept out)", "Gumbel noise also in eval mode: outputs vary 5e-3 to 2e-2 between runs", "here: argmax routing, deterministic"),
    ("token sort (kept out)", "unstable sort: order among equal routes depends on the platform (up to 3e-2)", "here: stable sort, ties in raster order"),
)
