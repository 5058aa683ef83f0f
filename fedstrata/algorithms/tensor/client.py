"""A tensor-family client: local epochs from a global model, one additive message per round."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from fedstrata.algorithms._validation import check_views
from fedstrata.algorithms.kernels import kernel_reference
from fedstrata.algorithms.tensor._common import (
    ViewData,
    center_update,
    distortions,
    grad_centers,
    memberships,
    objective,
    phi,
    view_powers,
    view_weights,
)
from fedstrata.algorithms.tensor.decompositions import (
    FACTOR_KEYS,
    SLOTS,
    VIEW_BLOCK_KEYS,
    VIEW_ROW_KEYS,
    align,
    als_step,
    block_dims,
    direction,
    reconstruct,
)
from fedstrata.algorithms.tensor.kernel import view_scales
from fedstrata.algorithms.tensor.model import TensorModel, message_shapes
from fedstrata.errors import ValidationError

__all__ = ["TensorClient"]

_V_MIN = 1e-6
_EXP_CLIP = 50.0


def _fked(data: Sequence[ViewData], centers: Sequence[np.ndarray]) -> tuple[list, list]:
    phis = [phi(v, A) for v, A in zip(data, centers, strict=True)]
    return phis, [-np.expm1(-p) for p in phis]


def _view_step(
    data: Sequence[ViewData], Um: np.ndarray, centers: Sequence[np.ndarray], alpha: float
) -> tuple[np.ndarray, np.ndarray, float]:
    """Distortions D_h under the new centres, the view weights (Eq. 31) and J (Eq. 25)."""
    _, F = _fked(data, centers)
    D = distortions(Um, F)
    v = view_weights(D, alpha)
    return D, v, objective(D, v, alpha)


def _normalized(v: np.ndarray) -> np.ndarray:
    v = np.maximum(v, _V_MIN)
    return v / v.sum()


class TensorClient:
    """One client of E-FKMVC / FedHK-PARAFAC2 / FedHK-Tucker / FedHK-MVC-Person.

    Parameters
    ----------
    model
        The run's :class:`~fedstrata.algorithms.tensor.TensorModel`.
    views
        The client's views, (n, d_h) float arrays already min-max scaled into [0, 1]
        (with the federation's pooled per-feature range).
    view_ids
        The global index of each view held (hybrid views: any non-empty subset).
    scales
        With ``model.bandwidth``: per view held (in ``views``' order) the kernel width
        γ·D̄·var_j of each feature of the scaled data, from the federation's pooled
        variances (:func:`~fedstrata.algorithms.tensor.kernel.view_scales`); by default
        this client's own.

    Local state (kept between rounds, never sent): E-FKMVC the local centres and view
    weights; the factor methods their local factors (the ``X_prev`` of the personalised
    blend) and view weights; FedHK-MVC-Person also its λ (core, P, Q, R) and ρ. Heat-kernel
    coefficients δ are computed once.

    What a round sends is described in :mod:`fedstrata.algorithms.tensor.model`; its
    arrays have exactly the shapes of :func:`~fedstrata.algorithms.tensor.message_shapes`.
    """

    def __init__(
        self,
        model: TensorModel,
        views: Sequence[np.ndarray],
        view_ids: Sequence[int],
        scales: Sequence[np.ndarray] | None = None,
    ) -> None:
        data = check_views(list(views))
        ids = [int(g) for g in view_ids]
        if len(ids) != len(data):
            raise ValidationError(f"got {len(data)} views but {len(ids)} view ids")
        if len(set(ids)) != len(ids) or any(not 0 <= g < model.n_views for g in ids):
            raise ValidationError(
                f"view ids must be distinct and in [0, {model.n_views}); got {ids}"
            )
        for g, X in zip(ids, data, strict=True):
            if X.shape[1] != model.dims[g]:
                raise ValidationError(
                    f"view {g} has {X.shape[1]} features; the model expects {model.dims[g]}"
                )
        if model.bandwidth is not None:
            if scales is None:  # a client on its own: its own spread
                scales = view_scales(model, [kernel_reference(X) for X in data], ids)
            if len(scales) != len(data):
                raise ValidationError(f"got {len(data)} views but {len(scales)} kernel scales")
        order = np.argsort(ids)
        #: The bandwidth kernel's widths per held view (in ``view_ids`` order), or None.
        self.kernel_scales: list[np.ndarray] | None = (
            None if scales is None else [np.asarray(scales[i], dtype=np.float64) for i in order]
        )
        self.model = model
        self.view_ids: tuple[int, ...] = tuple(ids[i] for i in order)
        self._data = [
            ViewData.build(
                data[i], model.delta, model.eps_delta, None if scales is None else scales[i]
            )
            for i in order
        ]
        self.n_samples = int(data[0].shape[0])
        self._held = np.zeros(model.n_views, dtype=bool)
        self._held[list(self.view_ids)] = True
        self._state: dict[str, Any] | None = None
        slots = SLOTS.get(model.kind, {})
        self.lambdas: dict[str, float] = {slot: float(model.lam) for slot in slots}
        self.rho = float(model.rho)

    # -- helpers ------------------------------------------------------------------------

    def _global_v(self, glob: Mapping[str, np.ndarray]) -> np.ndarray:
        """The global view weights restricted to the held views, renormalised."""
        return _normalized(np.asarray(glob["V"], dtype=np.float64)[list(self.view_ids)])

    def _global_centers(self, glob: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        m = self.model
        if m.kind == "centers":
            off = m.offsets
            A = np.asarray(glob["A"], dtype=np.float64)
            return [A[:, off[h] : off[h + 1]] for h in self.view_ids]
        f = {k: np.asarray(glob[k], dtype=np.float64) for k in FACTOR_KEYS[m.kind]}
        return reconstruct(m.kind, f, m.dims, self.view_ids)

    def _blend(self, glob: Mapping[str, np.ndarray]) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """Personalised start factors and view weights (pure: the state is not changed)."""
        m = self.model
        gf = {k: np.asarray(glob[k], dtype=np.float64) for k in FACTOR_KEYS[m.kind]}
        gv = self._global_v(glob)
        if self._state is None:
            prev, prev_v = gf, gv
        else:
            prev, prev_v = self._state["factors"], self._state["v"]
        key_lam = {key: self.lambdas[slot] for slot, key in SLOTS[m.kind].items()}
        f0 = {k: key_lam[k] * gf[k] + (1.0 - key_lam[k]) * prev[k] for k in gf}
        if m.personalized:
            v0 = _normalized(self.rho * gv + (1.0 - self.rho) * prev_v)
        elif m.view_start == "global":
            v0 = gv
        else:  # Alg. 2/3 line 6: uniform starting view weights
            v0 = np.full(len(self.view_ids), 1.0 / len(self.view_ids))
        return f0, v0

    def _model_for_labels(
        self, glob: Mapping[str, np.ndarray]
    ) -> tuple[list[np.ndarray], np.ndarray]:
        m = self.model
        if m.personalized:
            f0, v0 = self._blend(glob)
            return reconstruct(m.kind, f0, m.dims, self.view_ids), v0
        return self._global_centers(glob), self._global_v(glob)

    # -- public -------------------------------------------------------------------------

    def memberships(self, glob: Mapping[str, np.ndarray]) -> np.ndarray:
        """Memberships (n, c) of the local samples (Eq. 29/75/86); the state is not changed.

        E-FKMVC, FedHK-Tucker and FedHK-PARAFAC2: under the global model (centres and view
        weights restricted to the held views, renormalised). FedHK-MVC-Person: under the
        client's personalised model, i.e. the λ-blend of the global factors with its
        previous local ones and the ρ-blend of the view weights (the global model for a
        client that has not stepped yet).
        """
        centers, v = self._model_for_labels(glob)
        _, F = _fked(self._data, centers)
        return memberships(F, view_powers(v, self.model.alpha), self.model.m)

    def labels(self, glob: Mapping[str, np.ndarray]) -> np.ndarray:
        """Hard labels (n,): argmax of :meth:`memberships` (does not change the state)."""
        return self.memberships(glob).argmax(axis=1)

    def step(self, glob: Mapping[str, np.ndarray]) -> dict[str, Any]:
        """Run the local epochs from the global model ``glob``; return the message."""
        centers = self.model.kind == "centers"
        msg = self._step_centers(glob) if centers else self._step_factors(glob)
        shapes = message_shapes(self.model)
        return {k: np.asarray(msg[k], dtype=np.float64).reshape(shapes[k]) for k in shapes}

    # -- E-FKMVC ------------------------------------------------------------------------

    def _step_centers(self, glob: Mapping[str, np.ndarray]) -> dict[str, Any]:
        m = self.model
        n = self.n_samples
        A = [a.copy() for a in self._global_centers(glob)]
        v = self._global_v(glob)
        if m.personalize and self._state is not None:
            # Eqs. 62-63 at (A_g, V_g) with the memberships under the global model, J/n
            phis, F = _fked(self._data, A)
            Um = memberships(F, view_powers(v, m.alpha), m.m) ** m.m
            D = distortions(Um, F)
            A = [
                a - m.eps_a * grad_centers(d, Um * np.exp(-p), a, w) / n
                for a, d, p, w in zip(A, self._data, phis, v**m.alpha, strict=True)
            ]
            v = _normalized(v - m.eps_v * m.alpha * v ** (m.alpha - 1.0) * D / n)
        J_old = np.inf
        for _ in range(m.local_epochs):
            phis, F = _fked(self._data, A)
            Um = memberships(F, view_powers(v, m.alpha), m.m) ** m.m
            Ws = [Um * np.exp(-p) for p in phis]
            stat_w = Ws if m.stats_weights == "hk" else [Um] * len(Ws)
            stats = [(w.T @ d.X, w.sum(axis=0)) for w, d in zip(stat_w, self._data, strict=True)]
            A = [
                center_update(d, W, a, m.center_update)
                for d, W, a in zip(self._data, Ws, A, strict=True)
            ]
            D, v, J = _view_step(self._data, Um, A, m.alpha)
            if np.isfinite(J_old) and abs(J - J_old) <= m.local_tol * abs(J_old):
                break
            J_old = J
        self._state = {"A": A, "v": v}
        s, c = m.n_views, m.n_clusters
        off = m.offsets
        ids = list(self.view_ids)
        Vfull = np.zeros(s)
        Vfull[ids] = n * v
        presence = n * self._held.astype(np.float64)
        if m.efkmvc_message == "stats":
            num = np.zeros((c, int(off[-1])))
            den = np.zeros((c, s))
            views = np.zeros(s)
            views[ids] = D
            for h, (sn, sd) in zip(ids, stats, strict=True):
                num[:, off[h] : off[h + 1]] = sn
                den[:, h] = sd
            return {
                "S_num": num, "S_den": den, "V": Vfull, "presence": presence,
                "views": views, "nJ": J, "n": n,
            }  # fmt: skip
        Afull = np.zeros((c, int(off[-1])))
        for h, a in zip(ids, A, strict=True):
            Afull[:, off[h] : off[h + 1]] = n * a
        return {"A": Afull, "V": Vfull, "presence": presence, "nJ": J, "n": n}

    # -- factor methods -----------------------------------------------------------------

    def _step_factor_stats(self, glob: Mapping[str, np.ndarray]) -> dict[str, Any]:
        """``factor_message="stats"``: one membership step's sums under the global model."""
        m = self.model
        n = self.n_samples
        centers, v = self._global_centers(glob), self._global_v(glob)
        _, F = _fked(self._data, centers)
        Um = memberships(F, view_powers(v, m.alpha), m.m) ** m.m
        D = distortions(Um, F)
        s, c, off = m.n_views, m.n_clusters, m.offsets
        ids = list(self.view_ids)
        num = np.zeros((c, int(off[-1])))
        den = np.zeros((c, s))
        mass = Um.sum(axis=0)
        for h, d in zip(ids, self._data, strict=True):
            num[:, off[h] : off[h + 1]] = Um.T @ d.X
            den[:, h] = mass
        views = np.zeros(s)
        views[ids] = D
        return {
            "S_num": num, "S_den": den, "presence": n * self._held.astype(np.float64),
            "views": views, "nJ": objective(D, v, m.alpha), "n": n,
        }  # fmt: skip

    def _step_factors(self, glob: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        m = self.model
        if m.factor_message == "stats":
            return self._step_factor_stats(glob)
        kind, dims, ids = m.kind, m.dims, list(self.view_ids)
        n = self.n_samples
        gf = {k: np.asarray(glob[k], dtype=np.float64) for k in FACTOR_KEYS[kind]}
        f0, v0 = self._blend(glob)
        f, v = f0, v0
        A = reconstruct(kind, f, dims, ids)
        J_old = np.inf
        J = np.inf
        Um = None
        D = np.zeros(len(ids))
        for _ in range(m.local_epochs):
            _, F = _fked(self._data, A)
            Um = memberships(F, view_powers(v, m.alpha), m.m) ** m.m
            N = Um.sum(axis=0)
            safe = np.maximum(N, 1e-12)[:, None]
            targets = [(Um.T @ d.X) / safe for d in self._data]
            f = als_step(
                kind, f, targets, N, view_powers(v, m.alpha), ids, dims, m.rank_tuple,
                n_als=m.n_als, n_iter_parafac=m.n_iter_parafac,
            )  # fmt: skip
            f = align(kind, f, gf, signs=m.factor_signs)
            A = reconstruct(kind, f, dims, ids)
            D, v, J = _view_step(self._data, Um, A, m.alpha)
            if np.isfinite(J_old) and abs(J - J_old) <= m.local_tol * abs(J_old):
                break
            J_old = J
        if m.personalized and Um is not None:
            self._adapt(glob, gf, f0, v0, Um)
        self._state = {"factors": f, "v": v}
        J_tilde = J / n if m.omega_j == "per_sample" else J
        expo = -m.tau * (J_tilde - float(glob["J_ref"]))
        wn = float(np.exp(np.clip(expo, -_EXP_CLIP, _EXP_CLIP))) * n
        msg: dict[str, np.ndarray] = {}
        rows_absent = ~self._held
        block_absent = np.repeat(rows_absent, block_dims(kind, dims, m.rank_tuple[0]))
        for k in FACTOR_KEYS[kind]:
            x = wn * f[k]
            if k in VIEW_ROW_KEYS[kind]:
                x[rows_absent] = 0.0
            elif k in VIEW_BLOCK_KEYS[kind]:
                x[block_absent] = 0.0
            msg[k] = x
        s = m.n_views
        Vfull = np.zeros(s)
        Vfull[ids] = wn * v
        views = np.zeros(s)
        views[ids] = D
        msg.update(
            V=Vfull, presence=wn * self._held.astype(np.float64), views=views,
            wn=np.array(wn), nJ=np.array(J), n=np.array(float(n)), clients=np.array(1.0),
        )  # fmt: skip
        return msg

    def _adapt(
        self,
        glob: Mapping[str, np.ndarray],
        gf: dict[str, np.ndarray],
        f0: dict[str, np.ndarray],
        v0: np.ndarray,
        Um: np.ndarray,
    ) -> None:
        """Alg. 4 Phase 5 on the client: λ ← clip(λ − β dJ/dλ), ρ likewise (J per sample).

        ``dJ/dλ^X = ⟨∂J/∂𝒜, d𝒜⟩`` at the round's start ``X⁽⁰⁾ = λX_g + (1−λ)X_prev`` with
        the memberships of the round's last epoch; ``d𝒜`` is the reconstruction with
        ``X`` replaced by ``X_g − X_prev`` (the model is linear in each factor).
        ``dJ/dρ = Σ_h α v_h^{α−1} D_h (V_g[h] − v_prev[h])``.
        """
        m = self.model
        n = self.n_samples
        if self._state is None:
            return  # X_prev = X_g: every derivative is 0
        prev, prev_v = self._state["factors"], self._state["v"]
        ids = list(self.view_ids)
        A0 = reconstruct(m.kind, f0, m.dims, ids)
        phis, F = _fked(self._data, A0)
        va = v0**m.alpha
        grads = [
            grad_centers(d, Um * np.exp(-p), a, w) / n
            for d, p, a, w in zip(self._data, phis, A0, va, strict=True)
        ]
        for slot, key in SLOTS[m.kind].items():
            dA = direction(m.kind, f0, key, gf[key] - prev[key], m.dims, ids)
            g = float(sum((G * d).sum() for G, d in zip(grads, dA, strict=True)))
            self.lambdas[slot] = float(np.clip(self.lambdas[slot] - m.beta * g, 0.0, 1.0))
        D = distortions(Um, F)
        g_rho = float((m.alpha * v0 ** (m.alpha - 1.0) * D * (self._global_v(glob) - prev_v)).sum())
        self.rho = float(np.clip(self.rho - m.beta * g_rho / n, 0.0, 1.0))
