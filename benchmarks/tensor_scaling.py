"""A measured version of the tensor paper's complexity table (Table 5).

"Personalized Federated Heat-Kernel Enhanced Multi-View Clustering via Advanced Tensor
Decomposition" states each method's client time per iteration: E-FKMVC
O(n·c·s·D), the three tensor methods O(n·c·r2·r3 + n·c·D·s), with D the total feature
count Σ d_h. This benchmark times one client's local step (one epoch,
:meth:`TensorClient.step`) of each method while one quantity grows and the others stay
fixed, fits the growth exponent (the slope of log time against log size, by least
squares) and prints it next to the exponent the paper's formula implies for that
sweep:

* ``n``: samples per client (s = 3 views of 20 features): the paper says 1;
* ``s``: views of 20 features each, so D = 20·s also grows: the paper's s·D says 2;
* ``d``: features per view (s = 3), so D grows: the paper says 1;
* ``r``: the decomposition's rank (Tucker: r2 = r with r1 = c and r3 = s; PARAFAC2
  and CP: r). The n·c·r2·r3 term grows linearly in r2, but the n·c·D·s term, which
  does not depend on the rank, dominates at these sizes: the formula implies ~0.

It also prints the bytes of one client message (float64 arrays of
:func:`message_shapes`) next to Table 5's communication complexity.

    python benchmarks/tensor_scaling.py [--smoke] [--repeats 3]
"""

from __future__ import annotations

import os

# one BLAS thread: the exponents are about the algorithms, not about how a shared
# machine's cores are split (set before numpy loads)
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import time
from collections.abc import Callable

import numpy as np

from fedstrata.algorithms.tensor import (
    METHODS,
    TensorClient,
    TensorModel,
    initial_global,
    message_shapes,
)

C = 8  # clusters: every rank below stays <= c, which PARAFAC2 needs

STATED = {  # Table 5, time per client iteration
    "e-fkmvc": "O(n c s D)",
    "fedhk-parafac2": "O(n c r2 r3 + n c D s)",
    "fedhk-tucker": "O(n c r2 r3 + n c D s)",
    "fedhk-mvc-person": "O(n c r2 r3 + n c D s)",
}
COMM = {
    "e-fkmvc": "O(c d s)",
    "fedhk-parafac2": "O(c r2 r3 + c^2 + D r2 + s r3)",
    "fedhk-tucker": "O(c r2 r3 + c^2 + D r2 + s r3)",
    "fedhk-mvc-person": "O(c r2 r3 + c^2 + D r2 + s r3)",
}
# the exponent the stated time implies for each sweep (D = Σ d_h grows with s and d)
IMPLIED = {
    "n": {m: 1.0 for m in METHODS},
    "s": {m: 2.0 for m in METHODS},
    "d": {m: 1.0 for m in METHODS},
    "r": {"e-fkmvc": 0.0, "fedhk-parafac2": 0.0, "fedhk-tucker": 0.0, "fedhk-mvc-person": 0.0},
}


def views_of(n: int, dims: tuple[int, ...], rng: np.random.Generator) -> list[np.ndarray]:
    """``n`` samples of C separated clusters per view, scaled into [0, 1]."""
    labels = rng.integers(0, C, size=n)
    out = []
    for d in dims:
        centers = rng.uniform(0.2, 0.8, size=(C, d))
        X = centers[labels] + rng.normal(scale=0.05, size=(n, d))
        lo, hi = X.min(axis=0), X.max(axis=0)
        out.append((X - lo) / np.where(hi > lo, hi - lo, 1.0))
    return out


def model_of(method: str, dims: tuple[int, ...], rank: int | None) -> TensorModel:
    """One local epoch per step; ``rank`` sets the factor rank (Tucker: r2)."""
    kw: dict = {"local_epochs": 1, "local_tol": 0.0}
    if rank is not None and method == "fedhk-tucker":
        kw["ranks"] = (C, rank, len(dims))
    elif rank is not None and method != "e-fkmvc":
        kw["rank"] = rank
    return TensorModel(method, C, dims, **kw)


def time_step(
    method: str, n: int, dims: tuple[int, ...], rank: int | None, repeats: int
) -> tuple[float, int]:
    """Fastest of ``repeats`` client steps (s), and the bytes of its message."""
    rng = np.random.default_rng(0)
    model = model_of(method, dims, rank)
    views = views_of(n, dims, rng)
    glob = initial_global(model, [rng.uniform(size=(C, d)) for d in dims])
    client = TensorClient(model, views, range(len(dims)))
    client.step(glob)  # warm: the round-1 path (caches, first decomposition)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        client.step(glob)
        best = min(best, time.perf_counter() - t0)
    nbytes = 8 * sum(int(np.prod(s)) for s in message_shapes(model).values())
    return best, nbytes


def slope(x: list[float], y: list[float]) -> float:
    """Least-squares slope of log y against log x."""
    return float(np.polyfit(np.log(x), np.log(y), 1)[0])


def sweeps(smoke: bool) -> dict[str, tuple[list[int], Callable[[int], tuple]]]:
    """Each sweep: its sizes and (n, dims, rank) for a size."""
    if smoke:
        ns, ss, ds, rs = [100, 200], [2, 3], [8, 12], [2, 4]
    else:
        ns, ss = [2000, 8000, 32000, 64000], [2, 4, 8, 16, 32]
        ds, rs = [20, 80, 320, 640], [2, 4, 8]
    n0 = 200 if smoke else 2000
    d0 = 8 if smoke else 20
    return {
        "n": (ns, lambda v: (v, (d0,) * 3, None)),
        "s": (ss, lambda v: (n0, (d0,) * v, None)),
        "d": (ds, lambda v: (n0, (v,) * 3, None)),
        "r": (rs, lambda v: (n0, (d0,) * 3, v)),
    }


def main() -> None:
    """Run the sweeps, print the times, the fitted exponents and the stated ones."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, one repeat (seconds)")
    ap.add_argument("--repeats", type=int, default=3, help="timed steps per point (fastest)")
    args = ap.parse_args()
    repeats = 1 if args.smoke else args.repeats
    print(f"client step (one local epoch), c = {C}, fastest of {repeats}")
    print(f"{'method':18s} {'sweep':5s} {'sizes':26s} {'seconds':44s} fitted  tail  stated")
    fitted: dict[tuple[str, str], float] = {}
    for method in METHODS:
        for name, (sizes, point) in sweeps(args.smoke).items():
            if name == "r" and method == "e-fkmvc":
                continue  # no decomposition, no rank
            times = [time_step(method, *point(v), repeats)[0] for v in sizes]
            fitted[method, name] = slope(sizes, times)
            tail = slope(sizes[-2:], times[-2:])  # the two largest: fixed costs fade
            shown = " ".join(f"{t:.4f}" for t in times)
            print(
                f"{method:18s} {name:5s} {sizes!s:26s} {shown:44s} "
                f"{fitted[method, name]:6.2f} {tail:5.2f}  {IMPLIED[name][method]:.0f}"
            )
    print()
    print("stated complexity (Table 5) next to the message of one client (float64)")
    _, dims, _ = sweeps(args.smoke)["n"][1](0)
    for method in METHODS:
        _, nbytes = time_step(method, 50, dims, None, 1)
        print(f"{method:18s} time {STATED[method]:26s} comm {COMM[method]:32s} {nbytes} B")
    print()
    print(
        "fitted = least-squares slope of log(time) on log(size); tail = the slope between "
        "the two largest sizes (fixed per-step costs fade); stated = the exponent the "
        "paper's time formula implies for the sweep"
    )


if __name__ == "__main__":
    main()
