"""What each of the authors' network conventions contributes: revert one at a time, compare with their outputs.

For every reference fixture case (``tests/fixtures/authors``: the authors' checkpoint format, inputs and
their network's float64 outputs) the imported model runs in float64 as it is (all conventions followed) and
with one convention replaced by a plausible alternative (the paper's text, or the obvious reading of it),
one at a time.  The maximum absolute difference from the authors' outputs over both inputs and all three
scales is written per case and variant.  The Face periodic wrap is not covered by any fixture (none is
periodic), so it is measured on a random DG layer instead: the authors' wrap against the alternative,
relative difference.

    python -m benchmarks.cpu.authors_conventions benchmarks/results/authors_conventions.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from dgno import provenance
from dgno.checkpoint import import_authors, load_trained
from dgno.layers import flux as flux_module
from dgno.layers import mambair
from dgno.layers.blocks import SCM
from dgno.layers.operator import DGOperatorLayer, HeadLayerNorm, _GalerkinLayer
from dgno.models import dgno as dgno_model
from dgno.models.authors import regenerate_state_dict

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = Path("tests") / "fixtures" / "authors"  # relative to the repository root

CASES = ("w1_face", "w1_cell", "hist_face")


@contextlib.contextmanager
def patched(obj: object, name: str, value: object) -> Iterator[None]:
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)


def alternative_residual(self, x, q, op):
    """Alternative: z = x + Q K_e, out = z + MLP(z)."""
    z = x + self._query_times(q, op)
    return z + self.mlp(z)


def alternative_scm(self, image):
    """Alternative (as far as the authors' weights allow): ReLU instead of GELU, no InstanceNorm."""
    y = image
    for layer in self.body:
        if isinstance(layer, torch.nn.GELU):
            y = F.relu(y)
        elif not isinstance(layer, torch.nn.InstanceNorm2d):
            y = layer(y)
    return y


def alternative_half(x):
    """Alternative: bilinear halving."""
    return F.interpolate(x, scale_factor=0.5, mode="bilinear", align_corners=False)


def alternative_head_norm(self, x, *, axis):
    """Alternative: (x − μ) / √(biased var + ε), over the feature axis of each head."""
    axis = axis % x.dim()
    trailing = (1,) * (x.dim() - 1 - axis)
    xc = x - x.mean(dim=axis, keepdim=True)
    y = xc * torch.rsqrt((xc * xc).mean(dim=axis, keepdim=True) + self.eps)
    return torch.addcmul(self.bias.view(*self.bias.shape, *trailing), y, self.weight.view(*self.weight.shape, *trailing))


def alternative_assemble_axis(minus, plus, *, axis, flux, boundary, tau=None):
    """Alternative (the paper's Appendix D): Dirichlet as −F(0, minus_0) on the first side and +F(plus_last, 0) on the last (own outward
    faces); periodic wrap F(plus_last, minus_0)."""
    axis = axis % minus.dim()
    n = minus.shape[axis]
    f = flux_module.numerical_flux
    interior = f(flux, plus.narrow(axis, 0, n - 1), minus.narrow(axis, 1, n - 1), tau)
    zero = torch.zeros_like(minus.narrow(axis, 0, 1))
    out = torch.cat([interior, zero], dim=axis) - torch.cat([zero, interior], dim=axis)
    edge = torch.zeros_like(out)
    if boundary == "dirichlet":
        edge.narrow(axis, 0, 1).sub_(f(flux, zero, minus.narrow(axis, 0, 1), tau))
        edge.narrow(axis, n - 1, 1).add_(f(flux, plus.narrow(axis, n - 1, 1), zero, tau))
    elif boundary == "periodic":
        wrap = f(flux, plus.narrow(axis, n - 1, 1), minus.narrow(axis, 0, 1), tau)
        edge.narrow(axis, n - 1, 1).add_(wrap)
        edge.narrow(axis, 0, 1).sub_(wrap)
    return out + edge


def alternative_assm_forward(self, x, size):
    """Alternative: the prompt sorted together with its token."""
    b, L, _ = x.shape
    h, w = size
    one_hot = self.routes(x)
    prompt = one_hot @ (self.prompt_codes @ self.prompt_basis)
    order = one_hot.detach().argmax(-1).argsort(dim=-1, stable=True)
    inverse = torch.empty_like(order).scatter_(1, order, torch.arange(L, device=x.device).expand(b, L))
    v = self.in_proj(x.transpose(1, 2).reshape(b, -1, h, w))
    v = (v * torch.sigmoid(self.cpe(v))).flatten(2).transpose(1, 2)
    v = mambair._take_rows(v, order)
    y = self._scan(v, mambair._take_rows(prompt, order))
    y = self.out_proj(self.out_norm(y))
    return mambair._take_rows(y, inverse)


VARIANTS: dict[str, list[tuple[object, str, Callable]]] = {
    "all authors' conventions": [],
    "1 residual x + MLP(z)  ->  z + MLP(z)": [(_GalerkinLayer, "_apply_operator", alternative_residual)],
    "2 SCM GELU + InstanceNorm  ->  ReLU, no norm": [(SCM, "forward", alternative_scm)],
    "3 nearest pyramid  ->  bilinear": [(dgno_model, "half", alternative_half)],
    "4 per-head norm unbiased std + eps  ->  sqrt(biased var + eps)": [(HeadLayerNorm, "normalise", alternative_head_norm)],
    "5 Dirichlet +F(inner face, 0)  ->  -F(0, K) / outward faces": [(flux_module, "assemble_axis", alternative_assemble_axis)],
    "7 ASSM prompt raster order  ->  sorted with the tokens": [(mambair.ASSM, "forward", alternative_assm_forward)],
}


def case_errors(case: Path, model: torch.nn.Module) -> float:
    expected = np.load(case / "expected.npz")
    worst = 0.0
    for name, suffix in (("input.npy", ""), ("input_96x128.npy", "_96x128")):
        x = torch.from_numpy(np.load(case / name)).double()
        with torch.no_grad():
            outs = model(x)
        for out, key in zip(outs, ("out4", "out2", "out1")):
            worst = max(worst, float(np.abs(out.numpy() - expected[key + suffix]).max()))
    return worst


def periodic_face_effect() -> dict:
    """Relative L2 difference between the authors' Face periodic wrap and the alternative on a random layer (no fixture covers it)."""
    torch.manual_seed(0)
    layer = DGOperatorLayer(dim=32, heads=4, element_size=8, variant="face", flux="avg_jump", boundary="periodic").double().eval()
    x = torch.randn(1, 32, 32, 48, dtype=torch.float64)
    with torch.no_grad():
        authors = layer(x)
        with patched(flux_module, "assemble_axis", alternative_assemble_axis):
            alternative = layer(x)
    return {"layer": "DGOperatorLayer(dim 32, 4 heads, 8x8 elements, face, avg_jump, periodic), random weights, 32x48 input",
            "relative_l2_difference": float((authors - alternative).norm() / (authors - x).norm())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="JSON file for the results")
    args = parser.parse_args()
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in CASES:
            case = ROOT / FIXTURES / name
            torch.save({"params": regenerate_state_dict(json.loads((case / "weights.json").read_text()))}, Path(tmp) / f"{name}.pth")
            model_pt = import_authors(Path(tmp) / f"{name}.pth", case / "options.json", Path(tmp) / f"{name}.pt")
            model = load_trained(model_pt)[0].double()
            for variant, patches in VARIANTS.items():
                with contextlib.ExitStack() as stack:
                    for obj, attr, value in patches:
                        stack.enter_context(patched(obj, attr, value))
                    rows.setdefault(variant, {})[name] = case_errors(case, model)
                print(f"{name:10s} {variant:70s} max |diff| {rows[variant][name]:.3e}", flush=True)
    result = {
        "what": "max abs difference from the authors' float64 outputs (both inputs, all three scales) with one convention replaced by its alternative",
        "fixtures": str(FIXTURES),
        "max_abs_diff": rows,
        "6 Face periodic wrap (no fixture is periodic)": periodic_face_effect(),
        "provenance": provenance.collect(torch.device("cpu")),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(args.out)


if __name__ == "__main__":
    main()
