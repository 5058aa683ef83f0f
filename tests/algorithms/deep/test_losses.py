import math

import numpy as np
import torch

from fedstrata.algorithms.deep.losses import cluster_entropy, nt_xent, pair_contrast
from fedstrata.algorithms.deep.mutual_information import mutual_information


def _nt_xent_by_hand(a, b, tau):
    z = np.vstack([a, b])
    z = z / np.linalg.norm(z, axis=1, keepdims=True)
    n = len(a)
    total = 0.0
    for i in range(2 * n):
        partner = i + n if i < n else i - n
        sims = [z[i] @ z[j] / tau for j in range(2 * n) if j != i]
        total += -(z[i] @ z[partner] / tau) + math.log(sum(math.exp(s) for s in sims))
    return total / (2 * n)


def test_nt_xent_matches_the_formula():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(5, 3)), rng.normal(size=(5, 3))
    got = nt_xent(torch.tensor(a), torch.tensor(b), 0.5)
    assert math.isclose(float(got), _nt_xent_by_hand(a, b, 0.5), rel_tol=1e-9)


def test_nt_xent_of_one_sample_is_zero_with_a_gradient():
    a = torch.ones(1, 3, requires_grad=True)
    loss = nt_xent(a, torch.ones(1, 3), 0.5)
    loss.backward()
    assert float(loss.detach()) == 0.0 and a.grad is not None


def test_pair_contrast_matches_the_formula():
    h = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    pos = torch.tensor([[3.0, 0.0], [1.0, 1.0]])
    neg = torch.tensor([[0.0, 1.0], [0.0, -1.0]])
    tau = 0.5
    rows = []
    for sp, sn in [(1.0, 0.0), (1 / math.sqrt(2), -1.0)]:
        rows.append(-math.log(math.exp(sp / tau) / (math.exp(sp / tau) + math.exp(sn / tau))))
    assert math.isclose(float(pair_contrast(h, pos, neg, tau)), sum(rows) / 2, rel_tol=1e-6)


def test_cluster_entropy_is_minus_the_entropy_of_the_mean_assignment():
    q = torch.full((4, 5), 0.2)
    assert math.isclose(float(cluster_entropy(q)), -math.log(5), rel_tol=1e-6)
    q = torch.tensor([[1.0, 0.0], [1.0, 0.0]])
    assert abs(float(cluster_entropy(q))) < 1e-9


def test_mutual_information_agrees_with_scikit_learn_on_the_same_bins():
    from sklearn.metrics import mutual_info_score

    rng = np.random.default_rng(1)
    a = rng.normal(size=(300, 4))
    b = a + 0.5 * rng.normal(size=a.shape)
    x, y = a.ravel(), b.ravel()
    bx = np.clip(np.digitize(x, np.linspace(x.min(), x.max(), 11)[1:-1]), 0, 9)
    by = np.clip(np.digitize(y, np.linspace(y.min(), y.max(), 11)[1:-1]), 0, 9)
    expected = mutual_info_score(bx, by) / math.log(2)
    assert math.isclose(mutual_information(a, b, 10), expected, rel_tol=1e-9)
    # independent features: only the histogram estimator's bias, about (bins-1)^2/(2N ln 2)
    assert mutual_information(a, rng.normal(size=a.shape)) < 0.1
    assert mutual_information(a, b) > 0.5
    assert mutual_information(a, np.zeros_like(a)) == 0.0
