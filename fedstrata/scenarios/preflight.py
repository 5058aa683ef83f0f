"""Pre-flight checks: find, before a run, every problem that would make it fail.

The schema (:mod:`fedstrata.scenarios.schema`) checks a scenario's fields and their
cross-field rules; what it cannot see needs the data: a split that would leave a
client without samples, more clusters than samples, a missing dataset file, a rank
above a view's size. :func:`preflight` builds the data and wiring exactly as a run does
(:mod:`fedstrata.scenarios.wiring`), has the algorithm's plug-in build its model, reads
every link model, and raises :class:`~fedstrata.errors.ScenarioError` objects whose
``path`` names the field to change; :func:`fedstrata.scenarios.loader.load_scenario`
adds file and line.
"""

from __future__ import annotations

from fedstrata.errors import FedstrataError, ScenarioError
from fedstrata.plugins.spec import needs_dims
from fedstrata.scenarios.budget import round_overruns, seconds
from fedstrata.scenarios.dp_plan import check_dp
from fedstrata.scenarios.schema import Scenario, ScenarioErrors, clip
from fedstrata.scenarios.wiring import PreparedData, Wiring, prepare_data, wire_topology

__all__ = ["preflight"]


def _check_links(sc: Scenario) -> list[ScenarioError]:
    """Build every link as the run does; problems come back located at their field."""
    from fedstrata.scenarios.build import latency_model, link_of

    links = [(f"topology.tiers.{i}.link", t.link) for i, t in enumerate(sc.topology.tiers)]
    links.append(("topology.clients.link", sc.topology.clients.link))
    errors = []
    for path, link in links:
        bad = False
        for key in ("latency", "jitter"):
            spec = getattr(link, key)
            if spec is None:
                continue
            try:
                latency_model(spec)
            except (FedstrataError, ValueError, OSError) as exc:
                bad = True
                where = f"{path}.{key}" + (".file" if spec.dist == "empirical" else "")
                reason = exc.reason if isinstance(exc, ScenarioError) else str(exc)
                errors.append(ScenarioError(clip(reason, 300), path=where))
        if not bad:
            try:
                link_of(link)
            except (FedstrataError, ValueError) as exc:
                errors.append(ScenarioError(clip(str(exc), 300), path=path))
    return errors


def _check_secure(sc: Scenario, wiring: Wiring) -> list[ScenarioError]:
    """Every secure session must be able to run: at least 3 members, a valid threshold."""
    if sc.privacy.secure_aggregation == "none":
        return []
    from fedstrata.nodes.secure import group_config, holders, threshold_count
    from fedstrata.scenarios.build import protocol_config, secure_groups

    protocol = protocol_config(sc, "preflight")
    errors: list[ScenarioError] = []
    for node, (n, below) in sorted(secure_groups(sc, wiring).items()):
        members = "clients" + (" asked per round" if below and sc.protocol.sample < 1 else "")
        if n < 3:
            errors.append(
                ScenarioError(
                    f"{node} aggregates {n} {members if below else 'children'}: a secure "
                    f"sum of fewer than 3 gives a member's input away (one: the sum is it; "
                    f"two: each learns the other's); give it at least 3",
                    path="privacy.secure_aggregation",
                )
            )
            continue
        h, t = holders(protocol, n), threshold_count(protocol, n)
        try:
            group_config(protocol, n, 1).check_group(n)
        except (FedstrataError, ValueError):
            errors.append(
                ScenarioError(
                    f"threshold {t} does not fit {node}'s group of {n}: each member's "
                    f"secrets have {h} share holders and the threshold must satisfy "
                    f"h/2 < t <= h",
                    path="privacy.threshold",
                )
            )
    return errors


def _check_budget(sc: Scenario, data: PreparedData, model: object) -> list[ScenarioError]:
    """Aggregators whose rounds can never close in time (see :mod:`.budget`)."""
    errors = []
    for o in round_overruns(sc, data, model):
        if not o.never:
            continue  # only at the typical latency: a warning (fedstrata.scenarios.advice)
        kind = "its quorum of children needs" if o.need > 1 else "a child needs"
        errors.append(
            ScenarioError(
                f"rounds of {o.node} ({o.tier}) cannot close within its {seconds(o.deadline)} "
                f"deadline: {kind} at least {seconds(o.hop.floor)} even with no latency "
                f"({o.hop.parts(latency=False)}); raise the deadline above "
                f"{seconds(o.hop.total)} or give the nodes more speed or bandwidth",
                path=o.path,
            )
        )
    return errors


def preflight(sc: Scenario, seed: int | None = None) -> PreparedData:
    """Run every check a run makes before it starts, and return the prepared data.

    Besides :func:`prepare_data` this checks the algorithm (its plug-in builds the model
    from the dataset's shape: a rank above a view's size, say, is refused here), the
    wiring (no aggregator without children), every link model (latency traces are
    read) and the round time budget: a deadline that no round can meet, even at zero
    latency (:mod:`fedstrata.scenarios.budget`).

    Parameters
    ----------
    sc
        A validated scenario.
    seed
        Overrides ``sc.seed``, as :func:`prepare_data`.

    Returns
    -------
    PreparedData
        What :func:`prepare_data` returns.

    Raises
    ------
    ScenarioError
        One problem, or :class:`~fedstrata.scenarios.schema.ScenarioErrors` with
        several, each with ``path`` set (no file or line: the loader adds them).

    """
    from fedstrata.scenarios.build import model_of

    errors: list[ScenarioError] = []

    def collect(exc: ScenarioError) -> None:
        errors.extend(exc.errors if isinstance(exc, ScenarioErrors) else [exc])

    data = model = None
    try:
        data = prepare_data(sc, seed)
    except ScenarioError as exc:
        collect(exc)
    try:
        if data is not None or not needs_dims(sc.algorithm.name):
            model = model_of(
                sc,
                None if data is None else [X.shape[1] for X in data.dataset.views],
                None if data is None else data.dataset.n_samples,
            )
    except ScenarioError as exc:
        collect(exc)
    except (FedstrataError, ValueError) as exc:
        errors.append(ScenarioError(clip(str(exc), 300), path="algorithm"))
    try:
        wiring = wire_topology(sc)
    except ScenarioError as exc:
        collect(exc)
    else:
        errors.extend(_check_secure(sc, wiring))
        if data is not None and model is not None:
            errors.extend(_check_budget(sc, data, model))
            errors.extend(check_dp(sc, data))
    errors.extend(_check_links(sc))
    if errors:
        raise ScenarioErrors(errors)
    assert data is not None
    return data
