"""DGNO network and model registry: shapes on any size, channels, rebuild, errors."""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from dgno.layers.blocks import ENCODER_BLOCKS, FAM, SCM, Downsample, Upsample, make_encoder_block, pad_to_multiple
from dgno.layers.operator import DGOperatorLayer, GlobalGalerkinLayer, LocalGalerkinLayer
from dgno.models.dgno import DGNO
from dgno.models.registry import build_model, list_models, model_spec

DG_NAMES = ["gg", "lg", "dgno-face", "dgno-cell"]


def test_registry_lists_the_dgno_family():
    assert set(DG_NAMES) <= set(list_models())


@pytest.mark.parametrize("name", DG_NAMES)
@pytest.mark.parametrize("shape", [(1, 1, 64, 64), (1, 1, 70, 90)])
def test_forward_shapes(name, shape):
    torch.manual_seed(0)
    model = build_model(name, scale="smoke")
    x = torch.rand(shape)
    with torch.no_grad():
        outs = model(x)
    h, w = shape[-2:]
    assert isinstance(outs, list) and len(outs) == 3
    assert [tuple(o.shape[-2:]) for o in outs] == [
        (math.ceil(h / 4), math.ceil(w / 4)),
        (math.ceil(h / 2), math.ceil(w / 2)),
        (h, w),
    ]
    assert outs[-1].shape == x.shape
    assert all(torch.isfinite(o).all() for o in outs)


def test_three_channel_input():
    model = build_model("dgno-cell", scale="smoke", in_channels=3)
    x = torch.rand(1, 3, 64, 64)
    with torch.no_grad():
        outs = model(x)
    assert outs[-1].shape == x.shape and outs[0].shape == (1, 3, 16, 16)
    assert model.hparams["in_channels"] == 3


def test_operator_type_is_a_constructor_argument():
    layers = {name: type(build_model(name, scale="smoke").ops1[0]) for name in DG_NAMES}
    assert layers == {
        "gg": GlobalGalerkinLayer,
        "lg": LocalGalerkinLayer,
        "dgno-face": DGOperatorLayer,
        "dgno-cell": DGOperatorLayer,
    }
    face = build_model("dgno-face", scale="smoke").ops1[0]
    cell = build_model("dgno-cell", scale="smoke").ops1[0]
    assert (face.variant, face.flux, face.boundary) == ("face", "avg_jump", "dirichlet")
    assert (cell.variant, cell.flux, cell.boundary) == ("cell", "jump", "neumann")


def test_decoder_stages_have_T_operator_layers():
    model = build_model("dgno-cell", scale="smoke", num_layers=3, element_size=4)
    assert len(model.ops4) == len(model.ops2) == len(model.ops1) == 3
    assert model.ops1[0].element_size == 4 and model.pad_multiple == 16


def test_gradients_reach_every_parameter():
    torch.manual_seed(0)
    model = build_model("dgno-face", scale="smoke")
    outs = model(torch.rand(2, 1, 32, 40))
    sum(o.square().mean() for o in outs).backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None or not torch.isfinite(p.grad).all()]
    assert not missing


def test_hparams_rebuild_identical_model():
    torch.manual_seed(0)
    model = build_model("dgno-face", scale="smoke", flux="upwind", operator_kwargs={"boundary": "periodic"})
    assert model.hparams["operator_kwargs"]["flux"] == "upwind"
    assert model.hparams["operator_kwargs"]["boundary"] == "periodic"
    clone = DGNO(**model.hparams)
    clone.load_state_dict(model.state_dict())
    x = torch.rand(1, 1, 40, 36)
    with torch.no_grad():
        for a, b in zip(model(x), clone(x)):
            assert_close(a, b)
    assert DGNO(**model.hparams).hparams == model.hparams


def test_model_spec_is_a_copy():
    spec = model_spec("dgno-cell", "paper")
    assert spec["encoder_block"] == "assm" and spec["encoder_channels"] == [48, 96, 192, 384]
    assert spec["encoder_blocks"] == [2, 4, 6, 2] and spec["decoder_channels"] == [192, 96, 48]
    assert spec["heads"] == 16 and spec["num_layers"] == 2
    assert spec["operator_kwargs"]["element_size"] == 8 and spec["operator_kwargs"]["learn_tau"] is True
    spec["heads"] = 1
    assert model_spec("dgno-cell", "paper")["heads"] == 16


def test_unknown_names_raise_with_allowed_list():
    with pytest.raises(ValueError) as err:
        build_model("dgno-edge")
    assert "'dgno-edge'" in str(err.value) and all(repr(n) in str(err.value) for n in DG_NAMES)
    with pytest.raises(ValueError, match="'huge'.*'demo'.*'paper'.*'smoke'"):
        build_model("gg", scale="huge")
    with pytest.raises(ValueError) as err:
        build_model("dgno-cell", scale="smoke", fluxx="jump")
    assert "'fluxx'" in str(err.value) and "'flux'" in str(err.value) and "'heads'" in str(err.value)
    with pytest.raises(ValueError, match="'flux'"):  # GG has no flux to override
        build_model("gg", scale="smoke", flux="jump")
    with pytest.raises(ValueError, match="'lax'"):
        build_model("dgno-cell", scale="smoke", flux="lax")
    with pytest.raises(ValueError, match="'fno'"):
        DGNO(operator="fno")


def test_encoder_block_registry():
    assert "conv" in ENCODER_BLOCKS
    block = make_encoder_block("conv", 16)
    x = torch.rand(1, 16, 8, 8)
    assert block(x).shape == x.shape
    with pytest.raises(ValueError) as err:
        make_encoder_block("transformer", 16)
    assert "'transformer'" in str(err.value) and "'conv'" in str(err.value) and "'assm'" in str(err.value)


def test_resampling_blocks_and_padding():
    x = torch.rand(2, 16, 12, 20)
    assert Downsample(16, 32)(x).shape == (2, 32, 6, 10)
    assert Upsample(16, 8)(x).shape == (2, 8, 24, 40)
    shallow = SCM(in_channels=1, dim=16)(torch.rand(2, 1, 12, 20) * 1000.0)
    assert shallow.shape == x.shape
    # affine InstanceNorm (initial γ = 1, β = 0): each map has zero mean and unit variance, whatever the brightness
    assert_close(shallow.mean(dim=(2, 3)), torch.zeros(2, 16), atol=1e-5, rtol=0)
    assert FAM(16)(x, shallow).shape == x.shape
    p = pad_to_multiple(torch.arange(9.0).view(1, 1, 3, 3), 4)
    assert p.shape == (1, 1, 4, 4)
    assert_close(p[0, 0, :3, 3], torch.tensor([1.0, 4.0, 7.0]))  # reflected, not zero
    tiny = pad_to_multiple(torch.ones(1, 1, 1, 1), 8)  # too small to reflect: replicate
    assert tiny.shape == (1, 1, 8, 8) and tiny.min() == 1


def test_padding_multiple_follows_element_size():
    assert build_model("dgno-cell", scale="smoke").pad_multiple == 32  # lcm(8, 4·8)
    assert build_model("gg", scale="smoke").pad_multiple == 8


def test_demo_scale_sizes():
    spec = model_spec("dgno-cell", "demo")
    assert spec["encoder_block"] == "conv" and spec["encoder_channels"] == [12, 24, 48, 96]
    assert spec["encoder_blocks"] == [1, 1, 1, 1] and spec["decoder_channels"] == [48, 24, 12]
    assert spec["heads"] == 4
    n = sum(p.numel() for p in build_model("dgno-cell", scale="demo").parameters())
    assert 1e5 < n < 2e6
