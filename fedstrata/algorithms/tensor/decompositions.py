"""Tensorly-backed factor models of the cluster-centre tensor (Tucker, PARAFAC2, CP).

The centre tensor of "Personalized Federated Heat-Kernel Enhanced Multi-View Clustering
via Advanced Tensor Decomposition" (Sinaga) is ``𝒜 ∈ R^{c×D×s}``: view ``h``'s centres
``A^h`` (c, d_h) zero-padded to ``D = max_h d_h`` (Eqs. 64-66). Three factor models of it
are provided, each as a dict of named arrays:

``"tucker"`` (FedHK-Tucker, Eqs. 70/85/89)
    ``𝒜 = G ×1 U ×2 Vf ×3 W``: core ``G`` (r1, r2, r3), cluster factor ``U`` (c, r1),
    feature factor ``Vf`` (D, r2), view factor ``W`` (s, r3). Slots: core = G, P = U,
    Q = Vf, R = W.
``"parafac2"`` (FedHK-PARAFAC2)
    The paper writes its "PARAFAC2" in Tucker form (Eqs. 69/74/78), which is Tucker.
    Reading used here: a true PARAFAC2 over the per-view slices, the varying mode being
    the feature mode, ``(A^h)ᵀ = P_h B diag(a_h) Cᵀ`` (d_h × c), fitted with
    :func:`tensorly.decomposition.parafac2`. Arrays: core ``B`` (r, r), cluster factor
    ``C`` (c, r), view factor ``A`` (s, r; row h = a_h), projections ``P`` (Σ_h d_h, r;
    view h's block is P_h). Slots: core = B, P = C, Q = P, R = A. The reconstruction
    ``A^h = C diag(a_h) (P_h B)ᵀ`` is linear in each of the four.
``"cp"`` (FedHK-MVC-Person's fallback)
    ``𝒜 = [[C, F, A]]`` by :func:`tensorly.decomposition.parafac` on the padded tensor:
    ``C`` (c, r), ``F`` (D, r), ``A`` (s, r). Slots: P = C, Q = F, R = A (no core).

Every local ALS step minimises the paper's weighted squared error (Eqs. 76, 79-81,
87, 90-92) ``Σ_i Σ_k μ_ik^m Σ_h v_h^α ||x_i^h − a_k^h||²``. With ``N_k = Σ_i μ_ik^m``,
``ω_h = v_h^α`` and the fuzzy-mean target ``T^h = Σ_i μ_ik^m x_i^h / N_k`` this equals a
constant plus ``||(T − 𝒜) ×1 diag(√N) ×3 diag(√ω)||²``; since the cluster and view modes
of all three models absorb diagonal scalings, one step is: scale the target, run an
*unweighted* tensorly decomposition warm-started from the equally scaled current factors
(``n_als`` sweeps), unscale. Padded features and views the client does not hold are
masked (Tucker, CP) or simply absent (PARAFAC2 slices). Decompositions are unique only
up to rotations (Tucker) or column scale/sign (PARAFAC2, CP), so a client aligns its
factors with the broadcast ones (:func:`align`) before they are averaged.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np

from fedstrata.errors import ValidationError

__all__ = [
    "DECOMPOSITIONS",
    "FACTOR_KEYS",
    "SLOTS",
    "VIEW_BLOCK_KEYS",
    "VIEW_ROW_KEYS",
    "align",
    "als_step",
    "block_dims",
    "direction",
    "factor_shapes",
    "initial_factors",
    "reconstruct",
]

DECOMPOSITIONS = ("parafac2", "tucker", "cp")
#: Factor names of each model, in message/model order.
FACTOR_KEYS: dict[str, tuple[str, ...]] = {
    "tucker": ("G", "U", "Vf", "W"),
    "parafac2": ("B", "C", "A", "P"),
    "cp": ("C", "F", "A"),
}
#: The paper's slots (core, P = cluster, Q = feature, R = view) of each model.
SLOTS: dict[str, dict[str, str]] = {
    "tucker": {"core": "G", "P": "U", "Q": "Vf", "R": "W"},
    "parafac2": {"core": "B", "P": "C", "Q": "P", "R": "A"},
    "cp": {"P": "C", "Q": "F", "R": "A"},
}
#: Factors whose row h belongs to view h (averaged over the view's holders only).
VIEW_ROW_KEYS: dict[str, frozenset[str]] = {
    "tucker": frozenset({"W"}),
    "parafac2": frozenset({"A"}),
    "cp": frozenset({"A"}),
}
#: Factors made of one row block per view (PARAFAC2's projections).
VIEW_BLOCK_KEYS: dict[str, frozenset[str]] = {
    "tucker": frozenset(),
    "parafac2": frozenset({"P"}),
    "cp": frozenset(),
}

Factors = dict[str, np.ndarray]
_TENSORLY_SEED = 0


def _offsets(dims: Sequence[int]) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(dims)]).astype(int)


def block_dims(kind: str, dims: Sequence[int], rank: int) -> list[int]:
    """Rows of each view's block of PARAFAC2's projections ``P``: max(d_h, r).

    A view with fewer features than the rank is zero-padded to r rows (``pad`` in
    :class:`~fedstrata.algorithms.tensor.TensorModel`); other models and views keep d_h.
    """
    if kind != "parafac2":
        return [int(d) for d in dims]
    return [max(int(d), int(rank)) for d in dims]


def _pad_rows(M: np.ndarray, rows: int) -> np.ndarray:
    """``M`` (d, c) with zero rows appended up to ``rows`` (unchanged when d >= rows)."""
    if M.shape[0] >= rows:
        return M
    return np.vstack([M, np.zeros((rows - M.shape[0], M.shape[1]))])


def factor_shapes(
    kind: str, n_clusters: int, dims: Sequence[int], ranks: tuple[int, ...]
) -> dict[str, tuple[int, ...]]:
    """Shapes of a model's factors; ``ranks`` is (r1, r2, r3) for Tucker, (r,) otherwise."""
    c, s, D = n_clusters, len(dims), max(dims)
    if kind == "tucker":
        r1, r2, r3 = ranks
        return {"G": (r1, r2, r3), "U": (c, r1), "Vf": (D, r2), "W": (s, r3)}
    (r,) = ranks
    if kind == "parafac2":
        rows = int(sum(block_dims(kind, dims, r)))
        return {"B": (r, r), "C": (c, r), "A": (s, r), "P": (rows, r)}
    return {"C": (c, r), "F": (D, r), "A": (s, r)}


def reconstruct(
    kind: str, f: Factors, dims: Sequence[int], views: Sequence[int]
) -> list[np.ndarray]:
    """Centres ``A^h`` (c, d_h) of the given global views from the factors ``f``."""
    from tensorly.tenalg import multi_mode_dot

    if kind == "tucker":
        full = multi_mode_dot(f["G"], [f["U"], f["Vf"], f["W"][list(views)]])
        return [full[:, : dims[h], i] for i, h in enumerate(views)]
    if kind == "parafac2":
        off = _offsets(block_dims(kind, dims, f["B"].shape[0]))
        return [
            ((f["C"] * f["A"][h]) @ (f["P"][off[h] : off[h + 1]] @ f["B"]).T)[:, : dims[h]]
            for h in views
        ]
    return [(f["C"] * f["A"][h]) @ f["F"][: dims[h]].T for h in views]


def direction(
    kind: str, f: Factors, key: str, delta: np.ndarray, dims: Sequence[int], views: Sequence[int]
) -> list[np.ndarray]:
    """d𝒜^h along ``delta`` in factor ``key`` (the model is linear in each factor)."""
    return reconstruct(kind, {**f, key: delta}, dims, views)


def _padded(
    targets: Sequence[np.ndarray], views: Sequence[int], n_clusters: int, dims: Sequence[int]
) -> tuple[np.ndarray, np.ndarray]:
    """The zero-padded c × D × s tensor of ``targets`` and its mask (1 = observed)."""
    T = np.zeros((n_clusters, max(dims), len(dims)))
    M = np.zeros_like(T)
    for A, h in zip(targets, views, strict=True):
        T[:, : dims[h], h] = A
        M[:, : dims[h], h] = 1.0
    return T, M


def initial_factors(
    kind: str, centers: Sequence[np.ndarray], dims: Sequence[int], ranks: tuple[int, ...]
) -> Factors:
    """Decompose the full centre tensor once (tensorly, SVD init, to convergence)."""
    from tensorly.decomposition import parafac, parafac2, tucker

    c = centers[0].shape[0]
    views = list(range(len(dims)))
    # tensorly's PARAFAC2 error is sqrt(‖X‖² − 2⟨X, M⟩ + ‖M‖²): at an exact fit rounding
    # can make it the sqrt of a tiny negative, a RuntimeWarning that means nothing here
    with warnings.catch_warnings(), np.errstate(invalid="ignore"):
        warnings.simplefilter("ignore", UserWarning)
        if kind == "tucker":
            T, M = _padded(centers, views, c, dims)
            core, fs = tucker(
                T, rank=list(ranks), init="svd", mask=M, n_iter_max=100, tol=1e-10,
                random_state=_TENSORLY_SEED,
            )  # fmt: skip
            return {"G": core, "U": fs[0], "Vf": fs[1], "W": fs[2]}
        if kind == "parafac2":
            rows = block_dims(kind, dims, ranks[0])
            slices = [_pad_rows(A.T, p) for A, p in zip(centers, rows, strict=True)]
            w, (Aw, B, C), P = parafac2(
                slices, ranks[0], init="svd", n_iter_max=200, tol=1e-10,
                random_state=_TENSORLY_SEED,
            )  # fmt: skip
            f = {"B": B * w, "C": C, "A": Aw, "P": np.vstack(P)}
            return align(kind, f, None)
        T, M = _padded(centers, views, c, dims)
        try:
            w, (C, F, Aw) = parafac(
                T, ranks[0], init="svd", mask=M, n_iter_max=200, tol=1e-10,
                random_state=_TENSORLY_SEED,
            )  # fmt: skip
        except np.linalg.LinAlgError:
            # a rank above what the small tensor holds (c·s components of a c × D × s
            # tensor) makes the normal equations singular; the ridge the ALS step uses
            w, (C, F, Aw) = parafac(
                T, ranks[0], init="svd", mask=M, n_iter_max=200, tol=1e-10, l2_reg=1e-10,
                random_state=_TENSORLY_SEED,
            )  # fmt: skip
        return align(kind, {"C": C, "F": F * w, "A": Aw}, None)


def als_step(
    kind: str,
    f: Factors,
    targets: Sequence[np.ndarray],
    N: np.ndarray,
    omega: np.ndarray,
    views: Sequence[int],
    dims: Sequence[int],
    ranks: tuple[int, ...],
    *,
    n_als: int = 1,
    n_iter_parafac: int = 5,
) -> Factors:
    """One weighted-LS update of the factors towards the fuzzy-mean ``targets``.

    ``targets[i]`` is view ``views[i]``'s target (c, d_h), ``N`` the cluster masses
    Σ_i μ_ik^m (c,), ``omega`` the weights v_h^α of the held views. Rows of views not in
    ``views`` keep their values where the model has per-view rows.
    """
    from tensorly.cp_tensor import CPTensor
    from tensorly.decomposition import parafac, parafac2, tucker
    from tensorly.parafac2_tensor import Parafac2Tensor
    from tensorly.tenalg import multi_mode_dot
    from tensorly.tucker_tensor import TuckerTensor

    sN = np.sqrt(np.maximum(N, 1e-12))
    s = len(dims)
    sw = np.ones(s)
    sw[list(views)] = np.sqrt(np.maximum(omega, 1e-12))
    out = {k: np.array(v) for k, v in f.items()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        if kind in ("tucker", "cp"):
            T, M = _padded(targets, views, N.size, dims)
            T *= sN[:, None, None] * sw[None, None, :]
            if kind == "tucker":
                init = TuckerTensor(
                    (f["G"].copy(), [f["U"] * sN[:, None], f["Vf"].copy(), f["W"] * sw[:, None]])
                )
                try:
                    core, fs = tucker(
                        T, rank=list(ranks), init=init, mask=M, n_iter_max=n_als, tol=0,
                        random_state=_TENSORLY_SEED,
                    )  # fmt: skip
                except np.linalg.LinAlgError:  # an SVD that did not converge: keep these
                    return out
                # unscale, then restore orthonormal cluster/view factors (QR, R into the
                # core): the gauge G ×n M⁻¹, U_n M is otherwise free and clients that
                # weight their views differently would send incomparable cores
                U, RU = np.linalg.qr(fs[0] / sN[:, None])
                W, RW = np.linalg.qr(fs[2] / sw[:, None])
                out["G"] = multi_mode_dot(core, [RU, RW], modes=[0, 2])
                out["U"], out["Vf"], out["W"] = U, fs[1], W
                return out
            init = CPTensor(
                (np.ones(ranks[0]), [f["C"] * sN[:, None], f["F"].copy(), f["A"] * sw[:, None]])
            )
            try:
                w, fs = parafac(
                    T, ranks[0], init=init, mask=M, n_iter_max=n_als, tol=0, l2_reg=1e-10,
                    random_state=_TENSORLY_SEED,
                )  # fmt: skip
            except np.linalg.LinAlgError:  # rank-deficient factors: keep the current ones
                return out
            out["C"], out["F"], out["A"] = fs[0] / sN[:, None], fs[1] * w, fs[2] / sw[:, None]
            return out
        rows = block_dims(kind, dims, ranks[0])
        off = _offsets(rows)
        vw = sw[list(views)]
        slices = [
            _pad_rows((w * T * sN[:, None]).T, rows[h])
            for w, T, h in zip(vw, targets, views, strict=True)
        ]
        init = Parafac2Tensor(
            (
                np.ones(ranks[0]),
                [f["A"][list(views)] * vw[:, None], f["B"].copy(), f["C"] * sN[:, None]],
                # tensorly requires orthonormal projections; without a mask it recomputes
                # them from the data before use, so the polar factor is only a placeholder
                [_polar(f["P"][off[h] : off[h + 1]]) for h in views],
            )
        )
        try:
            w, (Aw, B, C), P = parafac2(
                slices, ranks[0], init=init, n_iter_max=n_als, tol=0, linesearch=False,
                n_iter_parafac=n_iter_parafac, random_state=_TENSORLY_SEED,
            )  # fmt: skip
        except np.linalg.LinAlgError:  # a singular inner CP system: keep the current factors
            return out
        out["B"], out["C"] = B * w, C / sN[:, None]
        out["A"][list(views)] = Aw / vw[:, None]
        for h, Ph in zip(views, P, strict=True):
            out["P"][off[h] : off[h + 1]] = Ph
        return out


def _polar(M: np.ndarray) -> np.ndarray:
    Y, _, Zt = np.linalg.svd(M, full_matrices=False)
    return Y @ Zt


def align(kind: str, f: Factors, ref: Factors | None, signs: str = "sum") -> Factors:
    """Fix the gauge of ``f`` (the reconstruction is unchanged).

    Tucker: rotate each factor onto ``ref``'s (orthogonal Procrustes, ``O_n =
    polar(U_nᵀ U_n^ref)``, ``U_n ← U_n O_n``, ``G ← G ×_n O_nᵀ``); without ``ref``
    nothing changes. PARAFAC2 and CP: unit-norm columns of the cluster and view factors
    with the scale moved into the core's columns (PARAFAC2's ``B``) or the feature factor
    (CP's ``F``), signs fixed so that each column of both has a non-negative sum
    (``signs="sum"``) or, with ``signs="reference"`` and a ``ref``, a non-negative inner
    product with ``ref``'s column: on centred data the sums are near 0 and their signs
    would differ from client to client, so averaged columns would cancel.
    """
    if signs not in ("sum", "reference"):
        raise ValidationError(f"signs must be 'sum' or 'reference', got {signs!r}")
    from tensorly.tenalg import mode_dot

    out = dict(f)
    if kind == "tucker":
        if ref is None:
            return out
        G = out["G"]
        for n, key in enumerate(("U", "Vf", "W")):
            rot = _polar(out[key].T @ ref[key])
            out[key] = out[key] @ rot
            G = mode_dot(G, rot.T, n)
        out["G"] = G
        return out
    absorb = "B" if kind == "parafac2" else "F"
    scale = np.ones(out["C"].shape[1])
    for key in ("C", "A"):
        X = out[key]
        norm = np.linalg.norm(X, axis=0)
        norm = np.where(norm > 0, norm, 1.0)
        agree = X.sum(axis=0) if signs == "sum" or ref is None else (X * ref[key]).sum(axis=0)
        sign = np.where(agree < 0, -1.0, 1.0)
        out[key] = X * (sign / norm)
        scale = scale * norm * sign
    out[absorb] = out[absorb] * scale[None, :]
    return out
