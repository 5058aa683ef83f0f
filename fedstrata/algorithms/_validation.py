"""Input and parameter checks shared by the estimators (public methods validate, helpers don't)."""

from __future__ import annotations

import numbers
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from fedstrata.errors import ValidationError

__all__ = [
    "ALPHA_MAX",
    "BANDWIDTH_MAX",
    "BANDWIDTH_MIN",
    "FIT_CONSTRAINTS",
    "FUZZY_CONSTRAINTS",
    "check_new_views",
    "check_params",
    "check_views",
    "interval",
    "one_of",
]

Constraint = Callable[[Any], str | None]


def interval(
    kind: type, low: float | None, high: float | None, *, closed: str = "both"
) -> Constraint:
    """Return a constraint accepting numbers of ``kind`` in an interval.

    ``closed`` is ``"both"``, ``"left"``, ``"right"`` or ``"neither"``.
    """
    integral = kind is int
    lo_incl = closed in ("both", "left")
    hi_incl = closed in ("both", "right")

    def check(value: Any) -> str | None:
        ok_type = (
            isinstance(value, numbers.Integral) if integral else isinstance(value, numbers.Real)
        )
        if isinstance(value, bool) or not ok_type:
            return f"must be {'an int' if integral else 'a real number'}, got {value!r}"
        if not np.isfinite(value):
            return f"must be finite, got {value!r}"
        below = low is not None and (value < low or (value == low and not lo_incl))
        above = high is not None and (value > high or (value == high and not hi_incl))
        if (below or above) and low is not None and high is not None:
            span = f"{'[' if lo_incl else '('}{low:g}, {high:g}{']' if hi_incl else ')'}"
            return f"must lie in {span}, got {value!r}"
        if below:
            return f"must be {'>=' if lo_incl else '>'} {low}, got {value!r}"
        if above:
            return f"must be {'<=' if hi_incl else '<'} {high}, got {value!r}"
        return None

    return check


def one_of(*options: Any) -> Constraint:
    """Return a constraint accepting exactly the given values."""

    def check(value: Any) -> str | None:
        if isinstance(value, str | int | float | type(None)) and value in options:
            return None
        return f"must be one of {', '.join(repr(o) for o in options)}; got {value!r}"

    return check


def check_params(owner: str, params: Mapping[str, Any], table: Mapping[str, Constraint]) -> None:
    """Validate ``params`` against a ``{name: constraint}`` table; raise on the first failure."""
    for name, constraint in table.items():
        problem = constraint(params[name])
        if problem is not None:
            raise ValidationError(f"{owner}: parameter {name!r} {problem}")


def check_views(views: Any, *, min_samples: int = 1, name: str = "views") -> list[np.ndarray]:
    """Validate multi-view data and return it as a list of C-contiguous float64 arrays.

    Parameters
    ----------
    views
        A sequence of 2-D array-likes, one per view, all with the same number of rows.
    min_samples
        Minimum number of rows required.
    name
        Used in error messages.

    Raises
    ------
    ValidationError
        When there are no views, a view is not 2-D numeric, is empty, holds NaN or inf,
        or the views disagree on the number of samples.
    """
    if isinstance(views, np.ndarray) or not isinstance(views, Sequence) or len(views) == 0:
        raise ValidationError(f"{name} must be a non-empty list of 2-D arrays (one per view)")
    out: list[np.ndarray] = []
    for h, view in enumerate(views):
        try:
            arr = np.asarray(view, dtype=np.float64)
        except (TypeError, ValueError):
            raise ValidationError(f"{name}[{h}] is not numeric") from None
        if arr.ndim != 2:
            raise ValidationError(
                f"{name}[{h}] must be 2-D (n_samples, n_features), got {arr.ndim}-D"
            )
        if arr.shape[0] == 0 or arr.shape[1] == 0:
            raise ValidationError(f"{name}[{h}] is empty (shape {arr.shape})")
        if not np.isfinite(arr).all():
            raise ValidationError(f"{name}[{h}] contains NaN or infinite values")
        out.append(np.ascontiguousarray(arr))
    sizes = {a.shape[0] for a in out}
    if len(sizes) != 1:
        counts = ", ".join(str(a.shape[0]) for a in out)
        raise ValidationError(f"all views must have the same number of samples; got {counts}")
    if out[0].shape[0] < min_samples:
        raise ValidationError(
            f"{name} has {out[0].shape[0]} samples; at least {min_samples} are needed"
        )
    return out


#: The view-weight exponent α's range, (1, ALPHA_MAX]. Every α in it keeps informative
#: memberships (v^α is rescaled in log space, see ``view_powers``); above it nothing is
#: gained (α = 200 and 1000 give the same fit on multiple-features and digits: the
#: weights are already ∝ 1/cost) and exponents near 700 in the rescaling come closer.
ALPHA_MAX = 1000.0
#: The kernel bandwidth γ's range, [BANDWIDTH_MIN, BANDWIDTH_MAX] (measured on
#: multiple-features and digits, ``benchmarks/hk_sweep.py``). Below 1 the kernel distance
#: 1 - exp(-φ) saturates at 1 for most sample-centre pairs and the memberships flatten
#: towards 1/c (mean largest membership 0.12-0.21 at γ = 0.05-0.25); above 10^6 the
#: distance is the Euclidean one over γ and 1 - exp(-φ) loses digits to cancellation.
BANDWIDTH_MIN = 1.0
BANDWIDTH_MAX = 1e6

#: Constraints every iterative multi-view estimator shares.
FIT_CONSTRAINTS: dict[str, Constraint] = {
    "n_clusters": interval(int, 2, None),
    "alpha": interval(float, 1.0, ALPHA_MAX, closed="right"),
    "max_iter": interval(int, 1, None),
    "tol": interval(float, 0.0, None),
    "n_init": interval(int, 1, None),
}
#: ... plus the fuzzifier of the fuzzy ones.
FUZZY_CONSTRAINTS: dict[str, Constraint] = {
    **FIT_CONSTRAINTS,
    "m": interval(float, 1.0, None, closed="neither"),
}


def check_new_views(estimator: Any, views: Any, fitted: str) -> list[np.ndarray]:
    """Validated views to predict on, for a fitted estimator.

    Raises NotFittedError when ``estimator`` has no ``fitted`` attribute yet, and
    ValidationError when the views' feature counts differ from ``n_features_in_``.
    """
    if not hasattr(estimator, fitted):
        from sklearn.exceptions import NotFittedError

        raise NotFittedError(f"{type(estimator).__name__} is not fitted yet; call fit first")
    data = check_views(views)
    if [X.shape[1] for X in data] != estimator.n_features_in_:
        raise ValidationError(
            f"expected views with {estimator.n_features_in_} features, got "
            f"{[X.shape[1] for X in data]}"
        )
    return data
