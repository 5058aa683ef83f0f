"""Pre-flight checks of a DP scenario against its data: bounds that fit, releases that fit.

The schema checks ``privacy.dp``'s fields alone; what needs the data is checked here
(:func:`check_dp`, called by :func:`fedstrata.scenarios.preflight.preflight`):

* ``bounds`` has one entry per view, and a per-feature entry one bound per feature;
* the releases a schedule plans (client unit, ``eq93``) compose within ε once the
  private setup's two releases are added;
* the run's releases fit its budget: the noise that ε forces on every release
  (:func:`fedstrata.scenarios.build.dp_noise_multiplier`, all releases composed) must
  leave a cluster's noisy sample count meaningful. Its standard deviation is the
  multiplier times one sample's sensitivity; when it reaches the number of samples
  an average cluster holds, every centre and seeding cell is noise and the run would
  report its initialisation as a private result. Such a scenario is refused with the
  numbers, and what to change.
"""

from __future__ import annotations

from fedstrata.errors import ScenarioError
from fedstrata.scenarios.privacy_schema import ViewBounds
from fedstrata.scenarios.schema import Scenario
from fedstrata.scenarios.wiring import PreparedData

__all__ = ["check_dp", "count_noise"]


def count_noise(sc: Scenario, dims: list[int]) -> float:
    """The std of the total noise on one cluster's summed sample count, per release."""
    from fedstrata.privacy.sample_dp import PrivateConfig, split_sigmas
    from fedstrata.scenarios.build import dp_noise_multiplier

    dp = sc.privacy.dp
    assert dp is not None
    radii = PrivateConfig(radius=dp.radius).radii(dims)
    return split_sigmas(dp_noise_multiplier(sc), radii)[1]


def _check_bounds(sc: Scenario, dims: list[int]) -> list[ScenarioError]:
    dp = sc.privacy.dp
    assert dp is not None
    assert dp.bounds is not None
    if len(dp.bounds) != len(dims):
        return [
            ScenarioError(
                f"{len(dp.bounds)} bounds for {len(dims)} views: give one [lo, hi] (or "
                "{lo: [...], hi: [...]}) per view",
                path="privacy.dp.bounds",
            )
        ]
    return [
        ScenarioError(
            f"view {g} has {d} features but its bounds list {len(b.lo)}",
            path=f"privacy.dp.bounds.{g}",
        )
        for g, (b, d) in enumerate(zip(dp.bounds, dims, strict=True))
        if isinstance(b, ViewBounds) and len(b.lo) != d
    ]


def check_dp(sc: Scenario, data: PreparedData) -> list[ScenarioError]:
    """The problems of ``sc``'s DP settings on its data (module docstring); [] without DP."""
    dp = sc.privacy.dp
    if dp is None:
        return []
    dims = [X.shape[1] for X in data.dataset.views]
    errors = _check_bounds(sc, dims)
    if errors:
        return errors
    from fedstrata.scenarios.build import dp_releases, planned_epsilon

    planned = planned_epsilon(sc)
    if planned > dp.epsilon * (1.0 + 1e-6):
        errors.append(
            ScenarioError(
                f"the run's releases would spend ε = {planned:.4g}, above its budget "
                f"{dp.epsilon:g}: the schedule '{dp.schedule}' takes the rounds' share and the "
                "private setup's two releases come on top; use eq93-normalised or constant",
                path="privacy.dp.schedule",
            )
        )
    n, c = data.dataset.n_samples, sc.algorithm.n_clusters
    sigma, per_cluster = count_noise(sc, dims), n / c
    if sigma >= per_cluster:
        errors.append(
            ScenarioError(
                f"the run's {dp_releases(sc)} releases cannot fit ε = {dp.epsilon:g}: each "
                f"needs noise of std {sigma:,.0f} on a cluster's sample count, above the "
                f"{per_cluster:,.0f} samples a cluster holds on average, so every centre "
                "would be noise; raise epsilon, lower protocol.rounds or privacy.dp.radius, "
                "or use more data",
                path="privacy.dp.epsilon",
            )
        )
    return errors
