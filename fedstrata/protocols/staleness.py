"""Staleness-aware server updates for asynchronous federations, as pure numpy functions.

The *staleness* of a contribution is ``t − τ``: the server's model version when the
contribution arrives (t) minus the version the client started from (τ); it is an
integer ≥ 0 and 0 means "computed on the current model".

Two server rules are provided:

* **FedAsync** ("Asynchronous Federated Optimization", Xie, Koyejo and Gupta, 2019):
  every arriving contribution is mixed into the model at once,
  ``x_t = (1 − α_t) x_{t−1} + α_t x_new`` with ``α_t = α · s(t − τ)``
  (:func:`fedasync_mix`, :func:`fedasync_mix_views`), where ``s`` is one of the
  paper's staleness functions (:func:`staleness_weight`):

  - ``"constant"``:   s(t − τ) = 1;
  - ``"polynomial"``: s_a(t − τ) = (t − τ + 1)^(−a),  a > 0;
  - ``"hinge"``:      s_{a,b}(t − τ) = 1 if t − τ ≤ b, else 1 / (a (t − τ − b) + 1),
    a > 0, b ≥ 0.

  Defaults are the values of the paper's experiments: a = 0.5 (polynomial);
  a = 10, b = 4 (hinge).

* **FedBuff** ("Federated Learning with Buffered Asynchronous Aggregation", Nguyen,
  Malik, Zhan, Yousefpour, Rabbat, Malek and Huba, 2022): the server buffers K
  contributions, each down-weighted by its staleness, then applies their aggregate in
  one step (:class:`StalenessBuffer`). The paper's weight 1/√(1 + staleness) is the
  polynomial function above with a = 0.5, the buffer's default.

Everything here is deterministic and free of I/O; the caller (a node) decides what
a contribution is (a model, a model delta, per-view centres) and what to do with the
result.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

import numpy as np

from fedstrata.errors import ValidationError

__all__ = [
    "DEFAULT_PARAMS",
    "STALENESS_KINDS",
    "StalenessBuffer",
    "fedasync_mix",
    "fedasync_mix_views",
    "staleness_weight",
]

#: Staleness functions of "Asynchronous Federated Optimization".
STALENESS_KINDS = ("constant", "polynomial", "hinge")

#: The parameters each function takes, with the paper's experimental values as defaults.
DEFAULT_PARAMS: Mapping[str, Mapping[str, float]] = MappingProxyType(
    {
        "constant": MappingProxyType({}),
        "polynomial": MappingProxyType({"a": 0.5}),
        "hinge": MappingProxyType({"a": 10.0, "b": 4.0}),
    }
)


def _real(name: str, value: Any, *, low: float, strict: bool) -> float:
    """``value`` as a finite float > low (strict) or ≥ low, else ValidationError."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValidationError(f"{name} must be a real number, got {value!r}")
    out = float(value)
    if not math.isfinite(out) or out < low or (strict and out == low):
        raise ValidationError(
            f"{name} must be finite and {'>' if strict else '>='} {low}, got {value!r}"
        )
    return out


def _params(kind: str, a: float | None, b: float | None) -> dict[str, float]:
    """The checked parameters of ``kind``, defaults filled in; unused ones are an error."""
    if kind not in STALENESS_KINDS:
        raise ValidationError(f"kind must be one of {', '.join(STALENESS_KINDS)}; got {kind!r}")
    given = {"a": a, "b": b}
    expected = DEFAULT_PARAMS[kind]
    extra = [p for p, v in given.items() if v is not None and p not in expected]
    if extra:
        raise ValidationError(f"the {kind} staleness function takes no parameter {extra[0]}")
    out = {}
    for p, default in expected.items():
        v = default if given[p] is None else given[p]
        # a > 0 (a = 0 would make every function constant), b >= 0
        out[p] = _real(p, v, low=0.0, strict=p == "a")
    return out


def _staleness(staleness: Any) -> np.ndarray:
    """``staleness`` as a float64 array of integers ≥ 0, else ValidationError."""
    s = np.asarray(staleness)
    if s.dtype == np.bool_ or not (
        np.issubdtype(s.dtype, np.integer) or np.issubdtype(s.dtype, np.floating)
    ):
        raise ValidationError(f"staleness must be integers, got dtype {s.dtype}")
    s = s.astype(np.float64)
    if not np.all(np.isfinite(s)):
        raise ValidationError("staleness must be finite")
    if np.any(s < 0):
        raise ValidationError(f"staleness must be >= 0, got {s.min():g}")
    if np.any(s != np.floor(s)):
        raise ValidationError("staleness must be whole numbers of model versions")
    return s


def staleness_weight(
    kind: str, staleness: Any, *, a: float | None = None, b: float | None = None
) -> np.ndarray:
    """The staleness function s(t − τ) of "Asynchronous Federated Optimization".

    Parameters
    ----------
    kind
        ``"constant"`` (s = 1), ``"polynomial"`` (s_a = (t − τ + 1)^(−a)) or
        ``"hinge"`` (s_{a,b} = 1 if t − τ ≤ b else 1 / (a (t − τ − b) + 1)).
    staleness
        t − τ: integers ≥ 0, any shape (a scalar gives a 0-d array). Integer-valued
        floats are accepted.
    a, b
        a > 0 (polynomial, hinge) and b ≥ 0 (hinge only); None takes the paper's
        experimental value (:data:`DEFAULT_PARAMS`). Passing a parameter the function
        does not take is an error.

    Returns
    -------
    np.ndarray
        float64 weights of ``staleness``'s shape, in (0, 1], equal to 1 at staleness 0
        and non-increasing in staleness. (For extreme a and staleness, e.g.
        a · ln(1 + t − τ) > 745, the polynomial underflows to 0.0 in float64.)

    Raises
    ------
    ValidationError
        Unknown kind; a ≤ 0, b < 0 or either not finite; staleness negative, not
        finite or not whole.
    """
    p = _params(kind, a, b)
    s = _staleness(staleness)
    if kind == "constant":
        return np.ones_like(s)
    if kind == "polynomial":
        return (s + 1.0) ** -p["a"]
    over = np.maximum(s - p["b"], 0.0)  # 0 inside the hinge, so the formula gives 1 there
    return np.where(s <= p["b"], 1.0, 1.0 / (p["a"] * over + 1.0))


def _scalar_weight(weight: Any) -> float:
    w = np.asarray(weight)
    if w.ndim != 0:
        raise ValidationError(f"weight must be a scalar, got shape {w.shape}")
    return _real("weight", w.item(), low=0.0, strict=False)


def _float_array(value: Any, what: str) -> np.ndarray:
    """``value`` as a float64 array, else ValidationError (never a bare ValueError)."""
    if isinstance(value, str | bytes):
        raise ValidationError(f"{what} must be a numeric array, got {type(value).__name__}")
    try:
        return np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"{what} must be a numeric array: {exc}") from None


def _mix(current: Any, new: Any, alpha_t: float) -> np.ndarray:
    x = _float_array(current, "current")
    y = _float_array(new, "new")
    if x.shape != y.shape:
        raise ValidationError(f"cannot mix shapes {x.shape} and {y.shape}")
    # The paper's form (not x + α_t (y − x)): α_t = 1 gives y exactly, α_t = 0 gives x.
    return (1.0 - alpha_t) * x + alpha_t * y


def _alpha_t(alpha: Any, weight: Any) -> float:
    a = _real("alpha", alpha, low=0.0, strict=True)
    if a > 1.0:
        raise ValidationError(f"alpha must be in (0, 1], got {alpha!r}")
    w = _scalar_weight(weight)
    if w > 1.0:
        raise ValidationError(f"weight must be in [0, 1], got {weight!r}")
    return a * w


def fedasync_mix(current: Any, new: Any, alpha: float, weight: float) -> np.ndarray:
    """FedAsync's server update: x_t = (1 − α_t) x_{t−1} + α_t x_new, α_t = α · weight.

    From "Asynchronous Federated Optimization": the server mixes each arriving model
    into the global one at once, with the mixing hyperparameter α scaled by the
    staleness function (``weight = s(t − τ)``, see :func:`staleness_weight`).

    Parameters
    ----------
    current
        x_{t−1}, the server's model.
    new
        x_new, the client's model (same shape; no broadcasting).
    alpha
        α ∈ (0, 1].
    weight
        s(t − τ) ∈ [0, 1], a scalar (a 0-d array from :func:`staleness_weight` is fine).

    Returns
    -------
    np.ndarray
        The mixed model (float64, a new array).

    Raises
    ------
    ValidationError
        Shapes differ, α outside (0, 1] or weight outside [0, 1] or not finite.
    """
    return _mix(current, new, _alpha_t(alpha, weight))


def fedasync_mix_views(
    current: Sequence[Any], new: Sequence[Any], alpha: float, weight: float
) -> tuple[np.ndarray, ...]:
    """:func:`fedasync_mix` applied view by view, with one α_t for the whole model.

    ``current`` and ``new`` are sequences of per-view arrays (e.g. centres of each
    view) of the same length and matching shapes. Returns a tuple of mixed arrays.
    """
    alpha_t = _alpha_t(alpha, weight)
    for views in (current, new):
        if isinstance(views, np.ndarray | str | bytes) or not isinstance(views, Sequence):
            raise ValidationError("current and new must be sequences of per-view arrays")
    if len(current) != len(new):
        raise ValidationError(f"cannot mix {len(current)} views with {len(new)}")
    return tuple(_mix(x, y, alpha_t) for x, y in zip(current, new, strict=True))


class StalenessBuffer:
    """FedBuff's server buffer: K staleness-weighted contributions, then one aggregate.

    From "Federated Learning with Buffered Asynchronous Aggregation": clients send
    contributions asynchronously; the server accumulates them, each scaled by a
    staleness weight (the paper uses 1/√(1 + staleness), here the default
    ``kind="polynomial"``, ``a=0.5``), and once K have arrived applies their average
    in one server step.

    **Normalisation.** :meth:`flush` returns the *weighted mean*
    Σ_i w_i c_i / Σ_i w_i, so equal staleness gives the plain arithmetic mean, together
    with the total weight W = Σ_i w_i and the count n. The paper divides the weighted
    sum by K instead, which also shrinks the step when the buffer is stale; that
    quantity is ``mean * W / n`` (with n = K), so a caller can use either.

    Sans-IO and deterministic: contributions are summed in arrival order into running
    float64 sums (memory of one contribution, as a secure-aggregation sum would be).
    A contribution is a sequence of arrays (e.g. one per view); the first one fixes the
    structure (number of arrays and their shapes) until the next :meth:`flush`.

    Parameters
    ----------
    k
        K ≥ 1, the number of contributions that makes the buffer :attr:`ready`.
    kind, a, b
        The staleness function, as in :func:`staleness_weight`.
    """

    def __init__(
        self,
        k: int,
        kind: str = "polynomial",
        *,
        a: float | None = None,
        b: float | None = None,
    ) -> None:
        if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1:
            raise ValidationError(f"k must be an int >= 1, got {k!r}")
        _params(kind, a, b)  # fail at construction, not at the first add
        self._k: int = int(k)
        self._kind: str = kind
        self._a: float | None = a
        self._b: float | None = b
        self._reset()

    def _reset(self) -> None:
        self._sums: list[np.ndarray] | None = None
        self._total = 0.0
        self._count = 0

    @property
    def k(self) -> int:
        """K, the buffer size."""
        return self._k

    @property
    def count(self) -> int:
        """Contributions added since the last flush."""
        return self._count

    @property
    def ready(self) -> bool:
        """True once K contributions are buffered (time to :meth:`flush`)."""
        return self._count >= self._k

    def add(self, contribution_arrays: Sequence[Any], staleness: int) -> None:
        """Buffer one contribution of the given staleness (t − τ, an integer ≥ 0).

        Raises
        ------
        ValidationError
            The buffer is full (flush first); ``contribution_arrays`` is not a sequence
            of arrays, has another structure than the buffered ones or holds
            non-finite values; the staleness is invalid or its weight underflows to 0.
            The buffer is unchanged when this is raised.
        """
        if self.ready:
            raise ValidationError(f"the buffer holds k={self._k} contributions; flush() first")
        if isinstance(contribution_arrays, np.ndarray | str | bytes) or not isinstance(
            contribution_arrays, Sequence
        ):
            raise ValidationError("a contribution must be a sequence of arrays (one per part)")
        arrays = [_float_array(x, "a contribution's array") for x in contribution_arrays]
        if not arrays:
            raise ValidationError("a contribution must hold at least one array")
        if self._sums is not None:
            want = [s.shape for s in self._sums]
            got = [x.shape for x in arrays]
            if got != want:
                raise ValidationError(f"contribution shapes {got} differ from buffered {want}")
        if not all(np.all(np.isfinite(x)) for x in arrays):
            raise ValidationError("a contribution holds non-finite values")
        s = np.asarray(staleness)
        if s.ndim != 0:
            raise ValidationError(f"staleness must be a scalar, got shape {s.shape}")
        w = float(staleness_weight(self._kind, s, a=self._a, b=self._b))
        if w <= 0.0:
            raise ValidationError(f"the weight of staleness {staleness!r} underflows to 0")
        if self._sums is None:
            self._sums = [w * x for x in arrays]
        else:
            for acc, x in zip(self._sums, arrays, strict=True):
                acc += w * x
        self._total += w
        self._count += 1

    def flush(self) -> tuple[tuple[np.ndarray, ...], float, int]:
        """Return ``(weighted mean arrays, total weight, count)`` and empty the buffer.

        Normally called once :attr:`ready`; flushing fewer than K (e.g. at a deadline)
        is allowed. Raises ValidationError when the buffer is empty.
        """
        if self._sums is None:
            raise ValidationError("nothing to flush: the buffer is empty")
        mean = tuple(acc / self._total for acc in self._sums)
        out = (mean, self._total, self._count)
        self._reset()
        return out
