"""Time per client-round of the deep hybrid-view methods (FMCSC, EFD-MVC), and their uploads.

One client of the multiple-features digits (``--samples``, default 170 ≈ 2000 / 12
clients), min-max scaled with the whole data set's ranges (as the plug-in scales with
the pooled ranges), either holding all six views (*full*) or only the 240 pixel
averages (*single*, the widest view). For each method and client type it prints:

1. **Time** of the consensus pre-training round and of one training round, driven
   through :class:`fedstrata.algorithms.deep.training.DeepClient` (``pretrain``,
   ``train_round``, ``embed``) from the seeded initial globals, next to a baseline
   measured in the same run on the same client: scikit-learn ``KMeans(10, n_init=10)``
   fitted on the concatenated views. Only *ratios* (deep time / k-means time) are
   printed as results: absolute seconds depend on the machine. Two networks:

   * ``default``: :class:`~fedstrata.algorithms.deep.DeepModel`'s defaults (hidden
     (256, 256), 50 pre-training, 10 local and 5 copy epochs), measured in full; with
     ``--smoke`` extrapolated from one epoch, like the papers' network;
   * ``papers``: hidden (500, 500, 2000), 250 pre-training and 25 local epochs, lr
     3e-4 (copy epochs: the default 5, the FMCSC paper gives none). Too slow to run
     in full on a CPU, so ONE epoch of each part is timed and multiplied:
     ``pretrain ≈ 250 · t(1 epoch)``, ``round ≈ 25 · t(1 local epoch) + 5 · t(copies,
     1 epoch)`` where a round's fixed cost (mutual information, embeddings) is counted
     in ``t(1 local epoch)``, so the extrapolation slightly overestimates. Skipped by
     ``--smoke``.

2. **Upload bytes** of a training round's partial, for each method and client type:
   the partial is built by :meth:`fedstrata.plugins.deep.DeepLearner.update` (a real
   learner, configured through the setup round) and encoded with
   :func:`fedstrata.wire.encode` in an ``update`` :class:`~fedstrata.wire.Envelope`;
   next to the prediction ``4 bytes × parameters × models + envelope``, where a
   multi-view FMCSC client uploads V + 1 models, a single-view one 1 and an EFD-MVC
   client 1, and the envelope is the same partial with every parameter vector
   replaced by an empty float32 array, plus 3 bytes per vector (msgpack ext32 instead
   of ext8 length field, for vectors of 16,384 parameters or more). The script fails
   if a measured size differs from the predicted one by a single byte.

3. **The papers' parameter count**: one FMCSC network with hidden (500, 500, 2000),
   latent 20, head 256 has ``Σ_v (1001·d_v + 2,596,536) + 5120·V + 5396`` float32
   parameters; checked against ``DeepModel.parameter_count`` (and PyTorch's count) for
   the multiple-features dims and for MNIST-USPS (784, 784) → 6,778,276.

What a GPU would change (an estimate, not a measurement): the training cost is
FLOP-bound, ≈ 6 flops per parameter and sample per epoch (forward + backward; the
plug-in's count, an upper bound for a single-view client, which runs one branch only).
The script prints the CPU rate this implies; a data-centre GPU sustains ~10-20 TFLOP/s
in float32 on large matrices, but a 170-sample client is one batch of at most 170 rows
per step, so only a fraction of that is reached (assumed 25 %), and each optimizer step
also pays kernel-launch latency (assumed ~2 ms per step for these few-hundred-kernel
networks). The printed GPU estimate is ``flops / (15 TFLOP/s × 0.25) + steps × 2 ms``.
For the default network the launch term dominates (a round is tens of steps of a few
GFLOP) and the estimated gain is ~10-30x over one core; for the papers' network the
FLOP term dominates and the gain approaches the flop-rate ratio times the utilisation
(~40-120x on one machine's measured CPU rates). These rest on the assumed constants, which the output states. Uploads
do not change: the bytes are the same on any device.

Threads are pinned to one (``OPENBLAS_NUM_THREADS``, ``OMP_NUM_THREADS``, PyTorch, as
the deep client itself does while training), so deep and k-means times are of one core.

    python benchmarks/deep_round.py [--smoke] [--samples 170] [--repeats 3]

About 1.5 minutes in full on one core; ``--smoke`` in well under 30 s.
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # timings of one core, as the deep client trains

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Sequence  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

from fedstrata.algorithms.deep import DeepModel, require_torch  # noqa: E402
from fedstrata.algorithms.tensor._common import minmax_scale_views  # noqa: E402
from fedstrata.nodes.config import ProtocolConfig  # noqa: E402
from fedstrata.plugins.messages import Shape  # noqa: E402
from fedstrata.scenarios.datasets import multiple_features  # noqa: E402
from fedstrata.wire import VERSION, Envelope, encode  # noqa: E402

K = 10
SINGLE_VIEW = 3  # the 240 pixel averages, the widest view of multiple features
PAPERS = {"hidden": (500, 500, 2000), "pretrain_epochs": 250, "local_epochs": 25, "lr": 3e-4}
MNIST_USPS = (784, 784)
MAX_WIRE = 2**31  # the papers' network exceeds the wire's default 64 MiB limit (see below)
GPU_TFLOPS, GPU_EFFICIENCY, GPU_STEP_S = 15.0, 0.25, 2e-3


def papers_formula(dims: Sequence[int]) -> int:
    """Parameters of one FMCSC network: hidden (500, 500, 2000), latent 20, head 256."""
    return sum(1001 * d + 2_596_536 for d in dims) + 5120 * len(dims) + 5396


def client_views(samples: int, seed: int = 0) -> tuple[list[np.ndarray], tuple[int, ...]]:
    """``samples`` rows of multiple features, min-max scaled with the whole set's ranges."""
    ds = multiple_features(shuffle=True, random_state=seed)
    views = [np.asarray(v, dtype=np.float64) for v in ds.views]
    scaled = minmax_scale_views(views, [v.min(0) for v in views], [v.max(0) for v in views])
    return [v[:samples] for v in scaled], tuple(v.shape[1] for v in views)


def best_of(fn: Callable[[], Any], repeats: int) -> float:
    """The smallest wall time of ``repeats`` calls (the least disturbed one)."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def kmeans_time(views: Sequence[np.ndarray], repeats: int) -> float:
    """The baseline: KMeans(10, n_init=10) on the client's concatenated views."""
    from sklearn.cluster import KMeans

    X = np.hstack(views)
    return best_of(lambda: KMeans(K, n_init=10, random_state=0).fit(X), repeats)


# -- timing -------------------------------------------------------------------------


def _globals_after_pretrain(
    model: DeepModel, views: Sequence[np.ndarray], view_ids: Sequence[int]
) -> dict[str, np.ndarray]:
    """Every group set to a network pre-trained one epoch (as one averaging round does)."""
    from fedstrata.algorithms.deep.network import initial_parameters
    from fedstrata.algorithms.deep.server import initial_state
    from fedstrata.algorithms.deep.training import DeepClient

    state = initial_state(model, initial_parameters(model))
    short = DeepClient(dataclasses.replace(model, pretrain_epochs=1), views, view_ids)
    (up,), _ = short.pretrain(state["groups"]["all"], seed=1)
    return {g: up.params.copy() for g in state["groups"]}


def time_client(
    model: DeepModel,
    views: Sequence[np.ndarray],
    view_ids: Sequence[int],
    *,
    full: bool,
    repeats: int,
) -> dict[str, float]:
    """Seconds of the pre-training round, a training round and an embedding.

    ``full``: run the model's epochs; otherwise time one epoch of each part and
    extrapolate to the model's epochs (see the module docstring).
    """
    from fedstrata.algorithms.deep.network import initial_parameters
    from fedstrata.algorithms.deep.rounds import train_round
    from fedstrata.algorithms.deep.server import initial_state
    from fedstrata.algorithms.deep.training import DeepClient

    client = DeepClient(model, views, view_ids)
    init = initial_state(model, initial_parameters(model))["groups"]["all"]
    globals_ = _globals_after_pretrain(model, views, view_ids)
    copies = model.method == "fmcsc" and len(view_ids) > 1 and model.copy_epochs > 0

    def with_epochs(**kw: int) -> DeepClient:
        return DeepClient(dataclasses.replace(model, **kw), views, view_ids)

    if full:
        pre = best_of(lambda: client.pretrain(init, seed=2), repeats)
        rnd = best_of(lambda: train_round(with_epochs(), globals_, seed=3), repeats)
    else:
        one = with_epochs(pretrain_epochs=1)
        pre = model.pretrain_epochs * best_of(lambda: one.pretrain(init, seed=2), repeats)
        local = with_epochs(local_epochs=1, copy_epochs=0)
        t_local = best_of(lambda: train_round(local, globals_, seed=3), repeats)
        rnd = model.local_epochs * t_local
        if copies:
            both = with_epochs(local_epochs=1, copy_epochs=1)
            t_both = best_of(lambda: train_round(both, globals_, seed=3), repeats)
            rnd += model.copy_epochs * max(t_both - t_local, 0.0)
    emb = best_of(lambda: client.embed(globals_), repeats)
    return {"pretrain": pre, "round": rnd, "embed": emb}


def round_flops(model: DeepModel, n: int, view_ids: Sequence[int]) -> tuple[float, int]:
    """(≈ flops, optimizer steps) of one training round, as the plug-in counts flops."""
    models = len(view_ids) if model.method == "fmcsc" and len(view_ids) > 1 else 0
    epochs = model.local_epochs + model.copy_epochs * models
    steps_per_epoch = max(1, -(-n // model.batch_size))
    return 6.0 * model.parameter_count * n * epochs, epochs * steps_per_epoch


# -- upload bytes --------------------------------------------------------------------


def _envelope(body: dict[str, Any]) -> bytes:
    env = Envelope(
        v=VERSION, kind="update", run="bench", round=2, tier="edge", sender="client-0", body=body
    )
    return encode(env, max_size=MAX_WIRE)


def upload_bytes(
    model: DeepModel, views: Sequence[np.ndarray], single: int
) -> dict[str, tuple[int, int, int]]:
    """{client kind: (measured bytes, predicted bytes, models)} of a training round's partial.

    Built by real :class:`~fedstrata.plugins.deep.DeepLearner` objects: a setup round
    (a full- and a single-view client), the configuration, then ``update`` on the
    first training round's model. Epochs do not change sizes: one of each is run.
    """
    from fedstrata.plugins.deep import DeepAlgorithm

    model = dataclasses.replace(model, pretrain_epochs=0, local_epochs=1, copy_epochs=1)
    dims = tuple(v.shape[1] for v in views)
    alg = DeepAlgorithm(model, ProtocolConfig(), Shape(K, dims))
    kinds = {"full": list(range(len(views))), "single": [single]}
    learners = {
        kind: alg.learner(
            [views[v] for v in ids],
            view_ids=ids,
            rng=np.random.default_rng(i),
            node_id=f"client-{i}",
        )
        for i, (kind, ids) in enumerate(kinds.items())
    }
    rng = np.random.default_rng(0)
    merged = alg.merge_setup([lr.setup()[0] for lr in learners.values()], rng)
    state, extras, complete = alg.after_setup(merged, None)
    assert complete, "the setup round left a view without a range"
    body = alg.model_body(dict(state, step=model.pretrain_rounds), extras)  # a training round
    P = alg.parameters
    out = {}
    for kind, lr in learners.items():
        lr.configure(extras)
        partial, _ = lr.update(body)
        measured = len(_envelope(partial))
        models = len(partial["sums"])
        empty = dict(partial, sums={g: np.zeros(0, np.float32) for g in partial["sums"]})
        envelope = len(_envelope(empty)) + 3 * models  # ext32 instead of ext8 per vector
        assert P >= 16_384, "the +3 bytes per vector hold for vectors of >= 65,536 bytes"
        out[kind] = (measured, 4 * P * models + envelope, models)
    return out


def expected_models(method: str, kind: str, n_views: int) -> int:
    """Models a client uploads per training round: FMCSC multi-view V + 1, else 1."""
    return n_views + 1 if method == "fmcsc" and kind == "full" else 1


# -- report --------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--smoke", action="store_true", help="one-epoch extrapolation only, < 30 s")
    p.add_argument("--samples", type=int, default=170, help="samples of the client (170)")
    p.add_argument("--repeats", type=int, default=None, help="timings per figure (best of)")
    args = p.parse_args(argv)
    require_torch()
    import torch

    torch.set_num_threads(1)
    repeats = args.repeats or (1 if args.smoke else 3)
    views, dims = client_views(args.samples)
    V, n = len(dims), args.samples
    kinds = {"full": (views, tuple(range(V))), "single": ([views[SINGLE_VIEW]], (SINGLE_VIEW,))}
    print(f"client: {n} samples of multiple features, dims {dims}; single-view = view "
          f"{SINGLE_VIEW} ({dims[SINGLE_VIEW]} features); one thread")  # fmt: skip

    km = {kind: kmeans_time(v, max(repeats, 3)) for kind, (v, _) in kinds.items()}
    print(f"baseline: KMeans({K}, n_init=10) on the client's concatenated views "
          f"(full {sum(dims)} features, single {dims[SINGLE_VIEW]})")  # fmt: skip

    nets = [("default", {}, not args.smoke)]
    if not args.smoke:
        nets.append(("papers", PAPERS, False))
    print("\n## time per client-round (ratio = deep / k-means fit on the same client)\n")
    print("| method | network | client | P (params) | pretrain / k-means "
          "| round / k-means | embed / k-means | how |")  # fmt: skip
    print("|---|---|---|---:|---:|---:|---:|---|")
    rates: dict[tuple[str, str, str], tuple[float, int, float]] = {}
    for method in ("fmcsc", "efd-mvc"):
        for net, kw, full in nets:
            model = DeepModel(method, K, dims, seed=0, **kw)  # type: ignore[arg-type]
            for kind, (v, ids) in kinds.items():
                t = time_client(model, v, ids, full=full, repeats=repeats)
                how = "measured" if full else "1 epoch x epochs (extrapolated)"
                print(f"| {method} | {net} | {kind} | {model.parameter_count:,} "
                      f"| {t['pretrain'] / km[kind]:.1f} | {t['round'] / km[kind]:.1f} "
                      f"| {t['embed'] / km[kind]:.2f} | {how} |")  # fmt: skip
                print(f"ratio {method} {net} {kind}: round / kmeans = "
                      f"{t['round'] / km[kind]:.2f}, pretrain / kmeans = "
                      f"{t['pretrain'] / km[kind]:.2f}")  # fmt: skip
                flops, steps = round_flops(model, n, ids)
                rates[method, net, kind] = (flops, steps, t["round"])

    print("\n## upload bytes of a training round (4 B x parameters x models + envelope)\n")
    print("| method | network | client | models | measured B | predicted B | envelope B |")
    print("|---|---|---|---:|---:|---:|---:|")
    ok = True
    for method in ("fmcsc", "efd-mvc"):
        for net, kw, _ in nets:
            model = DeepModel(method, K, dims, seed=0, **kw)  # type: ignore[arg-type]
            sizes = upload_bytes(model, views, SINGLE_VIEW)
            for kind, (measured, predicted, models) in sizes.items():
                want = expected_models(method, kind, V)
                envelope = predicted - 4 * model.parameter_count * models
                ok &= measured == predicted and models == want
                print(f"| {method} | {net} | {kind} | {models} | {measured:,} | {predicted:,} "
                      f"| {envelope} |")  # fmt: skip
                print(f"bytes {method} {net} {kind}: measured {measured} predicted "
                      f"{predicted} models {models} (expected {want})")  # fmt: skip

    print("\n## the papers' FMCSC network: Σ_v (1001·d_v + 2,596,536) + 5120·V + 5396\n")
    from fedstrata.algorithms.deep.network import parameter_count as torch_count

    for name, d in (("multiple features", dims), ("MNIST-USPS", MNIST_USPS)):
        m = DeepModel("fmcsc", K, d, hidden=(500, 500, 2000), latent=20, head=256)
        formula, counted, built = papers_formula(d), m.parameter_count, torch_count(m)
        ok &= formula == counted == built
        print(f"papers {name} dims {d}: formula {formula:,} = parameter_count {counted:,} "
              f"= torch {built:,}: {formula == counted == built}; "
              f"one model {4 * formula / 2**20:.1f} MiB, FMCSC multi-view upload "
              f"(V+1 = {len(d) + 1} models) {4 * formula * (len(d) + 1) / 2**20:.1f} MiB")  # fmt: skip
    ok &= papers_formula(MNIST_USPS) == 6_778_276
    print("note: the wire's default message limit is 64 MiB (fedstrata.wire.DEFAULT_MAX_SIZE);"
          " a multi-view FMCSC upload of the papers' network exceeds it on both data sets")  # fmt: skip

    print("\n## what a GPU would change (an estimate, not a measurement)\n")
    for (method, net, kind), (flops, steps, secs) in rates.items():
        gpu = flops / (GPU_TFLOPS * 1e12 * GPU_EFFICIENCY) + steps * GPU_STEP_S
        print(f"{method} {net} {kind}: round of {flops / 1e9:.1f} GFLOP in {steps} steps: CPU rate "
              f"{flops / secs / 1e9:.1f} GFLOP/s measured; GPU estimate {gpu:.3f} s "
              f"(assumed {GPU_TFLOPS:g} TFLOP/s x {GPU_EFFICIENCY:g} + {GPU_STEP_S * 1e3:g} ms "
              f"per step): ~{secs / gpu:.0f}x")  # fmt: skip
    print("(flops: the plug-in's 6 x parameters x samples x epochs, an upper bound for a "
          "single-view client; the GPU constants are assumptions, not measurements)")  # fmt: skip
    print(f"\nbytes check: {'all measured sizes equal the predictions' if ok else 'MISMATCH'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
