import numpy as np
import pytest
import torch

from fedstrata.algorithms.deep import DeepModel
from fedstrata.algorithms.deep.network import (
    flat_parameters,
    initial_parameters,
    load_parameters,
    network_of,
    parameter_count,
)
from fedstrata.errors import ValidationError


@pytest.mark.parametrize("method", ["fmcsc", "efd-mvc"])
@pytest.mark.parametrize(
    ("dims", "hidden"), [((784, 784), (500, 500, 2000)), ((5, 7, 3), (16,)), ((2, 2), (8, 4))]
)
def test_parameter_count_without_torch_equals_the_network(method, dims, hidden):
    model = DeepModel(method, 4, dims, hidden=hidden, latent=6, head=9)
    assert model.parameter_count == parameter_count(model)


def test_paper_architecture_has_the_papers_size():
    # FMCSC's Table 5 upper bound for MNIST-USPS is 6.7M parameters; the reference code's
    # network (Fc500-Fc500-Fc2000-Fc20 per view, heads of 256) has 6,778,276 plus a
    # 10 x 20 centroid matrix we do not keep in the network.
    model = DeepModel("fmcsc", 10, (784, 784), hidden=(500, 500, 2000), latent=20, head=256)
    assert model.parameter_count == 6_778_276


def test_flat_parameters_round_trip_and_seeded_start():
    model = DeepModel("efd-mvc", 3, (4, 5), hidden=(8,), latent=3, head=5, seed=11)
    a, b = initial_parameters(model), initial_parameters(model)
    assert a.dtype == np.float32 and a.shape == (model.parameter_count,)
    assert np.array_equal(a, b)
    other = initial_parameters(DeepModel("efd-mvc", 3, (4, 5), hidden=(8,), latent=3, head=5))
    assert not np.array_equal(a, other)
    net = network_of(model)
    load_parameters(net, a)
    assert np.array_equal(flat_parameters(net), a)
    # seeding the start does not move the caller's global torch generator
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    initial_parameters(model)
    assert torch.equal(torch.rand(3), expected)


def test_missing_view_contributes_a_zero_code():
    model = DeepModel("fmcsc", 3, (4, 5), hidden=(8,), latent=3, head=5)
    net = network_of(model)
    x0 = torch.rand(6, 4)
    out = net([x0, None])
    assert out.z[1] is None and out.xhat[1] is None and out.hv[1] is None
    manual = net.fusion(torch.cat([net.encoders[0](x0), torch.zeros(6, 3)], dim=1))
    expected = manual / manual.norm(dim=1, keepdim=True)
    assert torch.allclose(out.h, expected, atol=1e-6)
    assert torch.allclose(net.embed([x0, None]), out.h)
    assert torch.allclose(out.h.norm(dim=1), torch.ones(6), atol=1e-6)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"method": "deep"},
        {"dims": (3,)},  # fmcsc needs two views
        {"hidden": ()},
        {"hidden": (0,)},
        {"lr": 0.0},
        {"temperature": -1.0},
        {"contrast_weight": 1.5},
        {"batch_size": 1},
        {"local_epochs": 0},
        {"latent": True},
    ],
)
def test_bad_hyper_parameters_are_refused(kwargs):
    base = {"method": "fmcsc", "n_clusters": 3, "dims": (3, 4)}
    with pytest.raises(ValidationError):
        DeepModel(**{**base, **kwargs})


def test_training_a_loaded_network_leaves_the_source_vector_alone():
    model = DeepModel("fmcsc", 3, (4, 5), hidden=(8,), latent=3, head=5)
    flat = initial_parameters(model)
    kept = flat.copy()
    net = network_of(model)
    load_parameters(net, flat)
    with torch.no_grad():
        for p in net.parameters():
            p.add_(1.0)
    assert np.array_equal(flat, kept)
    # a read-only buffer (a decoded message) loads too
    frozen = kept.copy()
    frozen.flags.writeable = False
    load_parameters(net, frozen)
    assert np.array_equal(flat_parameters(net), kept)
