"""Effective rank (exp of the singular-value entropy) and the hooks that capture the operator latents."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from dgno.analysis.rank import capture_latents, effective_rank, latent_matrix, latent_rank_table, operator_layers
from dgno.models.registry import build_model


def test_full_rank_identity_like_matrix_has_rank_n():
    n = 7
    m = np.zeros((20, n))
    m[:n, :n] = 3.0 * np.eye(n)  # tall, n equal singular values
    assert effective_rank(m) == pytest.approx(n, rel=1e-9)
    q, _ = np.linalg.qr(np.random.default_rng(0).standard_normal((50, n)))  # orthonormal columns, any basis
    assert effective_rank(q) == pytest.approx(n, rel=1e-9)


def test_rank_one_matrix_has_rank_one():
    rng = np.random.default_rng(1)
    m = np.outer(rng.standard_normal(40), rng.standard_normal(6))
    assert effective_rank(m) == pytest.approx(1.0, abs=1e-6)
    z = rng.standard_normal((4096, 48))
    full = effective_rank(z)
    assert 0.95 * 48 < full < 48 and effective_rank(7 * z) == pytest.approx(full)  # scaling z leaves it unchanged


def test_effective_rank_between_one_and_min_dim_and_zero_matrix():
    m = torch.randn(30, 5, generator=torch.Generator().manual_seed(0))
    r = effective_rank(m)
    assert 1.0 < r <= 5.0
    # two equal singular values and one of half their size: exp(H) with p = (0.4, 0.4, 0.2)
    d = np.diag([2.0, 2.0, 1.0])
    assert effective_rank(d) == pytest.approx(math.exp(-(2 * 0.4 * math.log(0.4) + 0.2 * math.log(0.2))))
    assert effective_rank(np.zeros((4, 3))) == 0.0
    with pytest.raises(ValueError, match="2-D"):
        effective_rank(np.zeros((2, 2, 2)))


def test_latent_matrix_is_tokens_by_channels():
    z = torch.arange(2 * 3 * 4, dtype=torch.float32).reshape(1, 2, 3, 4)
    m = latent_matrix(z)
    assert m.shape == (12, 2)
    assert torch.equal(m[:, 1], z[0, 1].flatten())


@pytest.mark.parametrize("name", ["gg", "dgno-cell"])
def test_hooks_capture_one_latent_per_scale_and_iteration(name):
    torch.manual_seed(0)
    model = build_model(name, scale="demo").eval()
    t_layers = model.hparams["num_layers"]
    d1, d2, d3 = model.hparams["decoder_channels"]
    h, w = 37, 50  # odd size: the model pads internally, hooks crop back to the image
    with torch.no_grad(), capture_latents(model, (h, w)) as store:
        model(torch.rand(1, 1, h, w))
    expected = {}
    for scale, c, k in (("s1", d1, 4), ("s2", d2, 2), ("s3", d3, 1)):
        for t in range(t_layers):
            expected[(scale, t)] = (1, c, -(-h // k), -(-w // k))
    assert {k: tuple(v.shape) for k, v in store.items()} == expected
    # hooks are removed afterwards
    assert all(not layer._forward_hooks for layer, _ in operator_layers(model).values())


def test_rank_table_averages_over_images_and_reports_utilisation():
    torch.manual_seed(0)
    model = build_model("dgno-face", scale="smoke")
    images = [torch.rand(1, 1, 32, 40) for _ in range(2)]
    table = latent_rank_table(model, images)
    assert len(table) == 3 * model.hparams["num_layers"]
    assert (table["n_images"] == 2).all()
    assert ((table["erank"] >= 1.0) & (table["erank"] <= table["channels"])).all()
    assert np.allclose(table["utilization"], table["erank"] / table["channels"])


def test_non_operator_network_is_rejected():
    with pytest.raises(ValueError, match="operator stack"):
        operator_layers(torch.nn.Conv2d(1, 1, 3))
