"""Baselines and lifting-ablation models: any-size forward, gradients, rebuild, published sizes, key parts."""

from __future__ import annotations

import json
import math

import pytest
import torch
from torch.testing import assert_close

from dgno.layers.blocks import make_encoder_block
from dgno.models.gkmnet import GaussianBank, gaussian_bank_1d
from dgno.models.mpt import PAPER_FACTORS, CrossScaleWindowAttention, heads_for
from dgno.models.registry import BASELINES, DGNO_FAMILY, LIFTING_BLOCKS, MPT_PAPER_FACTORS, build_model, list_models, model_spec

# spandrel's NAFNet LayerNorm backward still uses ctx.saved_variables (its code, not ours)
pytestmark = pytest.mark.filterwarnings("ignore:'saved_variables' is deprecated:DeprecationWarning")

# Every baseline the registry declares, and the lifting ablation's networks: a network added to the registry
# gets the any-size, gradient and rebuild tests below without a line here.
NAMES = [*BASELINES, *LIFTING_BLOCKS]
MULTI = {"gkmnet", "mimo-unet", *LIFTING_BLOCKS}  # known to return [1/4, 1/2, 1] outputs; any other may return either


def test_registry_lists_every_baseline():
    assert set(NAMES) <= set(list_models()) and set(NAMES) >= MULTI
    for name in NAMES:
        for scale in ("paper", "demo", "smoke"):
            model_spec(name, scale)  # raises ValueError when a scale is missing


def test_every_registry_entry_names_its_network_and_each_family_has_its_table():
    """One entry per name holds the network and its sizes (plain data, no torch); the network is imported
    only when built. A name whose network does not resolve would only fail when built."""
    assert set(DGNO_FAMILY) | set(BASELINES) == set(list_models()) and not set(DGNO_FAMILY) & set(BASELINES)
    for entry in (*DGNO_FAMILY.values(), *BASELINES.values()):
        assert callable(entry.network_class()), entry.network
    assert {n for n, e in DGNO_FAMILY.items() if e.network == "dgno.models.dgno:DGNO"} == {"gg", "lg", "dgno-face", "dgno-cell"}
    assert {n for n, e in DGNO_FAMILY.items() if e.network.startswith("dgno.models.lifting:")} == set(LIFTING_BLOCKS)
    assert model_spec("mpt", "paper")["factors"] == MPT_PAPER_FACTORS == PAPER_FACTORS


@pytest.mark.parametrize("name", NAMES)
def test_any_size_forward(name):
    torch.manual_seed(0)
    model = build_model(name, scale="smoke").eval()
    for shape in [(1, 1, 64, 64), (1, 1, 70, 90)]:
        with torch.no_grad():
            outs = model(torch.rand(shape))
        h, w = shape[-2:]
        assert isinstance(outs, list) and outs[-1].shape == shape
        assert all(torch.isfinite(o).all() for o in outs)
        if name in MULTI or len(outs) > 1:  # coarse to fine, the paper's three scales
            assert [tuple(o.shape[-2:]) for o in outs] == [
                (math.ceil(h / 4), math.ceil(w / 4)),
                (math.ceil(h / 2), math.ceil(w / 2)),
                (h, w),
            ]
        else:
            assert len(outs) == 1


@pytest.mark.parametrize("name", NAMES)
def test_gradients_reach_every_parameter(name):
    torch.manual_seed(0)
    model = build_model(name, scale="smoke").train()
    # Zero-initialised scales (NAFNet's β/γ, zero biases) block the gradient of whatever sits behind
    # them at step 0 only; give them a value a trained model would have before checking.
    with torch.no_grad():
        for p in model.parameters():
            if not p.any():
                p.fill_(0.1)
    outs = model(torch.rand(2, 1, 40, 48))
    sum(o.square().mean() for o in outs).backward()
    bad = [n for n, p in model.named_parameters() if p.grad is None or not torch.isfinite(p.grad).all() or not p.grad.any()]
    assert not bad


@pytest.mark.parametrize("name", NAMES)
def test_hparams_rebuild_identical_outputs(name):
    """A network records the complete kwargs of its constructor (JSON-safe): they rebuild it exactly."""
    torch.manual_seed(0)
    model = build_model(name, scale="smoke").eval()
    hparams = json.loads(json.dumps(model.hparams))
    rebuilt = type(model)(**hparams)
    rebuilt.load_state_dict(model.state_dict())
    rebuilt.eval()
    x = torch.rand(1, 1, 48, 56)
    with torch.no_grad():
        for a, b in zip(model(x), rebuilt(x)):
            assert_close(a, b, rtol=0, atol=0)


def _params(name: str, in_channels: int) -> int:
    return sum(p.numel() for p in build_model(name, scale="paper", in_channels=in_channels).parameters())


def test_paper_sizes_match_published_counts():
    # RGB counts of the published configurations (see benchmarks/cpu/models.py for sources)
    assert _params("nafnet", 3) == 17_111_907  # NAFNet-width32, GoPro
    assert _params("restormer", 3) == 26_126_644  # Restormer, motion deblurring (26.13 M)
    assert _params("mpt", 3) == 19_799_356  # MPT default model (19.80 M)
    assert round(_params("mimo-unet", 3) / 1e6, 1) == 6.8  # MIMO-UNet (6.8 M)


def test_lifting_models_are_dgno_cell_with_another_encoder_block():
    blocks = {"nafnet-dgno": "NAFBlock", "restormer-dgno": "TransformerBlock", "mpt-dgno": "MPTBlock"}
    for name, block in LIFTING_BLOCKS.items():
        spec = model_spec(name, "paper")
        assert spec == {**model_spec("dgno-cell", "paper"), "encoder_block": block}
        model = build_model(name, scale="smoke")
        assert type(model.enc1[0]).__name__ == blocks[name]
        assert model.ops1[0].variant == "cell"
    assert heads_for(48) == 1 and heads_for(384) == 8 and heads_for(12) == 1 and heads_for(100) == 2
    assert make_encoder_block("mpt_block", 96).cswa.heads == 2


def test_cross_scale_window_attention_shift_never_mixes_wrapped_regions():
    torch.manual_seed(0)
    for factor in (1, 2):
        attn = CrossScaleWindowAttention(4, 1, factor=factor, window=4, shift=True)
        x = torch.randn(1, 4, 16, 16)
        y = x.clone()
        y[..., :2, :] += 5.0  # top rows change; cyclic shift puts them next to the bottom rows
        with torch.no_grad():
            diff = (attn(x) - attn(y)).abs().amax(dim=(0, 1, 3))
        assert diff[:2].min() > 0 and diff[8:].max() == 0


def test_gaussian_bank_is_unit_sum_with_identity_first():
    taps = gaussian_bank_1d(4, 0.5, 9)
    assert_close(taps.sum(dim=1), torch.ones(5))
    assert taps[0, 4] == 1 and taps[0].count_nonzero() == 1
    bank = GaussianBank(num_kernels=4, sigma_step=0.5, kernel_size=9)
    x = torch.rand(2, 3, 12, 10)
    out = bank(x)
    assert out.shape == (2, 3, 5, 12, 10)
    assert_close(out[:, :, 0], x)
    assert_close(bank(torch.full((1, 1, 8, 8), 0.3)), torch.full((1, 1, 5, 8, 8), 0.3))


def test_bad_options_raise():
    with pytest.raises(ValueError, match="layer_norm"):
        build_model("restormer", scale="smoke", layer_norm="Batch")
    with pytest.raises(ValueError, match="window"):
        build_model("mpt", scale="smoke", window=5)
    with pytest.raises(ValueError, match="channels"):
        build_model("gkmnet", scale="smoke", channels=[8, 8])
