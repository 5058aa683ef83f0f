"""``node.yaml``: the configuration of one long-lived node on a device.

.. code-block:: yaml

    scenario: federation.yaml   # the federation's scenario, the same file on every node
    node: client-3              # this device's node id in the scenario's topology
    run: trial-1                # run id shared by the deployment [default: the scenario's name]
    broker:
      url: mqtts://broker.lan:8883
      username: client-3
      password_file: secrets/client-3.pass
      ca: certs/ca.crt
      cert: certs/client-3.crt
      key: certs/client-3.key
    data:                       # clients only: the views this device holds
      - {view: 0, path: data/view0.csv}
      - {view: 1, path: data/local.npz, key: x1}
    out: records/client-3       # where the node writes node.json and its results
    timeout_s: 3600             # optional wall-clock limit
    faults: inject              # the scenario's crashes, dropouts, availability [inject|ignore]
    signing:                    # required (unless insecure: true)
      key: keys/client-3.key    # this node's Ed25519 seed (mode 0600)
      public_keys: keys/public-keys.json   # every node's public key
    # insecure: true            # instead of signing: send and accept unsigned messages

Every relative path is read from the folder of ``node.yaml`` (``~`` is expanded).
Unknown keys are errors, types are strict (``"5"`` is not a number), and every
problem is reported at once as ``node.yaml:LINE: path: reason``; problems inside the
scenario file are reported at their own file and line. :func:`load_node_config`
checks everything a node can check without the broker: the scenario (its schema,
the algorithm, the wiring; not its dataset split, which is the simulator's), that
the node exists, the broker settings and files, every data file, and the output
folder.

The broker password is never written inline (``broker.password`` is an error):
it is read from ``password_file`` (its first line) or, when that is absent, from
the environment variable :data:`PASSWORD_ENV`.

A node on a device signs every message it sends and accepts only signed ones,
whatever the scenario's ``privacy.sign`` says: ``signing`` is required, the node's
Ed25519 key file (written by ``fedstrata keys``, mode 0600; a file others can read is
refused) and the JSON roster of every node's public key (``{"client-0": "<64 hex
digits>", ...}``), which must list every node of the topology and agree with the
node's own key. Only an explicit ``insecure: true`` (and no ``signing``) runs the
node unsigned, which anyone who can publish on the broker can then impersonate; a
scenario with ``privacy.sign: true`` cannot run insecure. Every node of a deployment
must make the same choice: a signing node rejects unsigned messages (``unsigned``)
and an insecure node cannot read signed ones.

``faults: inject`` (the default) injects the scenario's crashes, dropouts and
availability for this node, from the schedule the simulator draws under the
scenario's seed (:mod:`fedstrata.scenarios.fault_inject`): a study moves to hardware
unchanged. ``faults: ignore`` runs the device without them (a warning says so).

``view_dims`` gives the feature count of every view of the federation. Every node
needs them; by default they are read from the scenario's dataset (generated or
loaded on the device, cheap for the synthetic one). Give ``view_dims`` when the
dataset is not available on the device; it must then agree on every node.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic import ValidationError as PydanticValidationError

from fedstrata.broker.endpoint import Endpoint
from fedstrata.device.build import DeviceNode, Role, build_node
from fedstrata.device.data import DataFileError, read_view
from fedstrata.errors import FedstrataError, ScenarioError
from fedstrata.nodes.sealing import Seal, load_roster
from fedstrata.plugins.spec import needs_dims
from fedstrata.privacy.signing import NodeKeys
from fedstrata.scenarios.loader import (
    _compose,
    _finish,
    _located,
    _pydantic_errors,
    _read,
    load_scenario,
)
from fedstrata.scenarios.schema import (
    MAX_SECONDS,
    Ident,
    Scenario,
    ScenarioErrors,
    clip,
    show,
)

__all__ = [
    "MAX_PASSWORD_BYTES",
    "PASSWORD_ENV",
    "BrokerSpec",
    "DataFileSpec",
    "NodeConfig",
    "NodeSpec",
    "load_node_config",
]

PASSWORD_ENV = "FEDSTRATA_BROKER_PASSWORD"
"""Environment variable holding the broker password when ``password_file`` is absent."""
MAX_PASSWORD_BYTES = 4096
"""Largest password file read."""

FileName = Annotated[str, Field(min_length=1, max_length=4096)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class BrokerSpec(_Strict):
    """How the node reaches its broker (``broker:`` in node.yaml).

    ``url`` is ``mqtt://HOST[:PORT]`` (plain TCP, port 1883 by default) or
    ``mqtts://HOST[:PORT]`` (TLS, 8883). ``ca`` is the CA certificate that signed the
    broker's certificate (default: the system's trusted CAs), ``cert`` and ``key``
    the node's client certificate and key for brokers that require one (TLS only;
    both or neither). ``username`` with ``password_file`` (or the
    ``FEDSTRATA_BROKER_PASSWORD`` environment variable) are the MQTT credentials.
    ``protocol`` is the MQTT version: 4 (3.1.1, default) or 5. ``max_attempts`` is
    how many failed connections in a row the node accepts mid-run before it gives up
    (``1 .. 1000000``; about 5 s apart at most).
    """

    url: Annotated[str, Field(min_length=1, max_length=1024)]
    username: Annotated[str, Field(min_length=1, max_length=256)] | None = None
    password_file: FileName | None = None
    ca: FileName | None = None
    cert: FileName | None = None
    key: FileName | None = None
    protocol: Literal[4, 5] = 4
    max_attempts: Annotated[int, Field(ge=1, le=1_000_000)] = 30

    @model_validator(mode="before")
    @classmethod
    def _no_inline_password(cls, data: Any) -> Any:
        if isinstance(data, dict) and "password" in data:
            raise ScenarioError(
                "never write the password here (node.yaml is shown, copied and backed up): "
                f"put it in a file named by password_file, or in the {PASSWORD_ENV} "
                "environment variable",
                path="broker.password",
            )
        return data


class DataFileSpec(_Strict):
    """One view held by a client (an entry of ``data:``).

    ``view`` is the view's index in the federation (``0 .. n_views - 1``), ``path``
    a ``.npz`` or ``.csv`` file, ``key`` the array inside an ``.npz`` archive
    (optional when it holds one array; not for CSV).
    """

    view: Annotated[int, Field(ge=0, le=9999)]
    path: FileName
    key: Annotated[str, Field(min_length=1, max_length=256)] | None = None


class SigningSpec(_Strict):
    """Message signing on a device: this node's key file and every node's public key."""

    key: FileName
    public_keys: FileName


class NodeSpec(_Strict):
    """The keys of node.yaml (see the module docstring)."""

    scenario: FileName
    node: Annotated[str, Field(min_length=1, max_length=256)]
    run: Ident | None = None
    broker: BrokerSpec
    data: Annotated[list[DataFileSpec], Field(min_length=1, max_length=10_000)] | None = None
    view_dims: (
        Annotated[list[Annotated[int, Field(ge=1, le=10_000_000)]], Field(min_length=1)] | None
    ) = None
    out: FileName
    timeout_s: Annotated[float, Field(gt=0.0, le=MAX_SECONDS)] | None = None
    signing: SigningSpec | None = None
    insecure: bool = False
    faults: Literal["inject", "ignore"] = "inject"


@dataclass(frozen=True, eq=False)
class NodeConfig:
    """A checked node.yaml, its paths resolved and its data read.

    Parameters
    ----------
    file
        The node.yaml file.
    scenario, scenario_file
        The federation's scenario and its file.
    node_id, role, tier, parent
        This node: its id, role (``root``, ``aggregator``, ``client``), tier and
        parent's id (``None`` for the root).
    run
        The run id (the topics' second level).
    endpoint
        The broker, credentials and TLS files.
    mqtt_protocol
        4 (MQTT 3.1.1) or 5 (MQTT 5.0).
    max_attempts
        Failed connections in a row accepted mid-run.
    dims
        The feature count of every view of the federation.
    dims_from
        ``"view_dims"`` (node.yaml) or ``"dataset"`` (the scenario's dataset).
    view_ids, views, data_files
        A client's views (indices into ``dims``, ascending), their arrays and the
        files they came from; empty for an aggregator.
    out
        The output folder (it may not exist yet).
    timeout_s
        Wall-clock limit of the node, or ``None``.
    seal
        Signs and verifies its messages, or ``None`` (``insecure``).
    insecure
        Whether node.yaml said ``insecure: true`` (unsigned messages).
    faults
        ``inject`` (the scenario's node faults for this node) or ``ignore``.
    warnings
        Things worth knowing that do not stop the node.
    """

    file: Path
    scenario: Scenario
    scenario_file: Path
    node_id: str
    role: Role
    tier: str
    parent: str | None
    run: str
    endpoint: Endpoint
    mqtt_protocol: int
    max_attempts: int
    dims: tuple[int, ...]
    dims_from: str
    view_ids: tuple[int, ...]
    views: tuple[np.ndarray, ...]
    data_files: tuple[Path, ...]
    out: Path
    timeout_s: float | None
    seal: Seal | None = None
    warnings: tuple[str, ...] = ()
    insecure: bool = False
    faults: str = "inject"

    @property
    def n_samples(self) -> int:
        """Samples held (0 for an aggregator)."""
        return int(self.views[0].shape[0]) if self.views else 0

    def build(self) -> DeviceNode:
        """The node object, built as the simulator builds it."""
        return build_node(
            self.scenario,
            self.node_id,
            run=self.run,
            dims=self.dims,
            views=list(self.views) if self.role == "client" else None,
            view_ids=self.view_ids if self.role == "client" else None,
            seal=self.seal,
        )


# ------------------------------------------------------------------------------ errors


def _node_file_errors(exc: ScenarioErrors) -> ScenarioErrors:
    """The loader's reading errors, worded for a node config instead of a scenario."""
    fixed = []
    for e in exc.errors:
        reason = e.reason.replace("; a scenario is small", "; a node config is small").replace(
            "empty scenario", "empty node config"
        )
        fixed.append(ScenarioError(reason, file=e.file, line=e.line, path=e.path))
    return ScenarioErrors(fixed)


# ------------------------------------------------------------------------------ checks


class _Problems:
    """Problems found in node.yaml (located at a dotted path) and in other files."""

    def __init__(self, root: yaml.Node | None, file: str) -> None:
        self.root = root
        self.file = file
        self.here: list[ScenarioError] = []
        self.elsewhere: list[ScenarioError] = []

    def add(self, path: str, reason: str) -> None:
        self.here.append(_located(reason, path, self.root, self.file))

    def raise_any(self) -> None:
        if self.here or self.elsewhere:
            raise ScenarioErrors([*_finish(self.here).errors, *self.elsewhere])


def _resolver(base: Path) -> Callable[[str], Path]:
    def resolve(name: str) -> Path:
        p = Path(name).expanduser()
        return p if p.is_absolute() else base / p

    return resolve


_WHERE = " (relative paths are read from the folder of the node config)"


def _password(
    spec: BrokerSpec, resolve: Callable[[str], Path], problems: _Problems, warnings: list[str]
) -> str | None:
    if spec.password_file is None:
        env = os.environ.get(PASSWORD_ENV)
        if env is not None and spec.username is None:
            warnings.append(f"{PASSWORD_ENV} is set but broker.username is not: it is not used")
            return None
        return env if env else None
    if spec.username is None:
        problems.add("broker.password_file", "a password needs a username: add broker.username")
        return None
    p = resolve(spec.password_file)
    try:
        st = p.stat()
    except OSError:
        problems.add("broker.password_file", f"{spec.password_file} does not exist{_WHERE}")
        return None
    if not stat.S_ISREG(st.st_mode):
        problems.add("broker.password_file", f"{spec.password_file} is not a regular file")
        return None
    if st.st_size > MAX_PASSWORD_BYTES:
        problems.add(
            "broker.password_file",
            f"{spec.password_file} is larger than {MAX_PASSWORD_BYTES} bytes; it holds the "
            "password on its first line",
        )
        return None
    try:
        text = p.read_bytes().decode("utf-8")
    except OSError as exc:
        problems.add(
            "broker.password_file",
            f"cannot read {spec.password_file}: {exc.strerror or type(exc).__name__}",
        )
        return None
    except UnicodeDecodeError:
        problems.add("broker.password_file", f"{spec.password_file} is not UTF-8 text")
        return None
    lines = text.splitlines()
    password = lines[0] if lines else ""
    if not password:
        problems.add(
            "broker.password_file", f"{spec.password_file} is empty (the password is line 1)"
        )
        return None
    if st.st_mode & 0o077:
        warnings.append(
            f"the password file {spec.password_file} can be read by other users "
            f"(mode {stat.S_IMODE(st.st_mode):04o}); chmod 600 it"
        )
    return password


def _endpoint(
    spec: BrokerSpec, resolve: Callable[[str], Path], problems: _Problems, warnings: list[str]
) -> Endpoint | None:
    ok = True
    try:
        bare = Endpoint.from_url(spec.url)  # host, port and TLS, as every runner reads them
    except FedstrataError as exc:
        problems.add("broker.url", str(exc))
        return None
    host, port, tls = bare.host, bare.port, bare.tls
    files: dict[str, str | None] = {}
    for key in ("ca", "cert", "key"):
        name = getattr(spec, key)
        files[key] = None
        if name is None:
            continue
        if not tls:
            problems.add(f"broker.{key}", "TLS files need an mqtts:// broker url")
            ok = False
            continue
        p = resolve(name)
        if not p.is_file():
            problems.add(f"broker.{key}", f"{name} does not exist{_WHERE}")
            ok = False
            continue
        files[key] = str(p)
    if (spec.cert is None) != (spec.key is None):
        missing, given = ("key", "cert") if spec.key is None else ("cert", "key")
        problems.add(
            f"broker.{given}", f"a client {given} needs its {missing}: add broker.{missing}"
        )
        ok = False
    password = _password(spec, resolve, problems, warnings)
    if spec.password_file is not None and password is None:
        ok = False
    if not ok:
        return None
    endpoint = Endpoint(
        host,
        port,
        tls=tls,
        ca_file=files["ca"],
        cert_file=files["cert"],
        key_file=files["key"],
        username=spec.username,
        password=password,
    )
    try:
        endpoint.tls_context()  # reads the CA, certificate and key: bad PEM is found now
    except FedstrataError as exc:
        problems.add("broker", str(exc))
        return None
    return endpoint


def _out_problem(out: Path) -> str | None:
    if out.exists():
        if not out.is_dir():
            return "is a file, not a folder"
        if not os.access(out, os.W_OK | os.X_OK):
            return "the folder is not writable"
        return None
    parent = out.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        return f"cannot be created: {parent} is not a writable folder"
    return None


def _scenario_root(sc_file: Path) -> yaml.Node | None:
    try:
        return _compose(_read(sc_file, str(sc_file)), str(sc_file))[1]
    except ScenarioErrors:
        return None


def _dataset_dims(sc: Scenario) -> tuple[int, ...]:
    from fedstrata.scenarios.wiring import scenario_dataset

    ds = scenario_dataset(sc)  # data.files or a built-in dataset
    return tuple(int(X.shape[1]) for X in ds.views)


def _data(
    spec: NodeSpec,
    dims: tuple[int, ...] | None,
    resolve: Callable[[str], Path],
    problems: _Problems,
) -> tuple[tuple[int, ...], tuple[np.ndarray, ...], tuple[Path, ...]]:
    """Read every data file; return view ids, arrays and paths sorted by view id."""
    assert spec.data is not None
    read: list[tuple[int, int, np.ndarray, Path]] = []  # (view, entry, array, file)
    first_of: dict[int, int] = {}
    for i, entry in enumerate(spec.data):
        where = f"data.{i}"
        if entry.view in first_of:
            problems.add(
                f"{where}.view",
                f"view {entry.view} is listed twice (also data.{first_of[entry.view]})",
            )
            continue
        first_of[entry.view] = i
        if dims is not None and entry.view >= len(dims):
            problems.add(
                f"{where}.view",
                f"no view {entry.view}: the federation's views are 0 .. {len(dims) - 1}",
            )
            continue
        p = resolve(entry.path)
        try:
            X = read_view(p, entry.key)
        except DataFileError as exc:
            extra = _WHERE if exc.reason == "does not exist" else ""
            problems.add(f"{where}.{exc.field}", f"{entry.path}: {exc.reason}{extra}")
            continue
        if dims is not None and X.shape[1] != dims[entry.view]:
            problems.add(
                where,
                f"{entry.path} has {X.shape[1]} features (columns) but view {entry.view} of the "
                f"federation has {dims[entry.view]}",
            )
            continue
        read.append((entry.view, i, X, p))
    if read:
        _, i0, X0, _ = read[0]
        for _, i, X, _ in read[1:]:
            if X.shape[0] != X0.shape[0]:
                problems.add(
                    f"data.{i}",
                    f"{spec.data[i].path} has {X.shape[0]} samples but {spec.data[i0].path} "
                    f"(data.{i0}) has {X0.shape[0]}; row i of every view is the same sample",
                )
    read.sort(key=lambda r: r[0])
    return (
        tuple(r[0] for r in read),
        tuple(r[2] for r in read),
        tuple(r[3] for r in read),
    )


def _ids_summary(sc: Scenario) -> str:
    ids = sc.node_ids()
    parts: list[str] = []
    for group in ids.values():
        if len(group) <= 3:
            parts.extend(group)
        else:
            parts.append(f"{group[0]} .. {group[-1]}")
    return ", ".join(parts)


def _load(p: Path, file: str) -> NodeConfig:
    try:
        text = _read(p, file)
        data, root, found = _compose(text, file)
    except ScenarioErrors as exc:
        raise _node_file_errors(exc) from None
    if data is None:
        raise ScenarioErrors([*found, ScenarioError("empty node config", file=file, line=1)])
    if not isinstance(data, dict):
        line = 1 if root is None else root.start_mark.line + 1
        raise _finish(
            [*found, ScenarioError("a node config must be a mapping", file=file, line=line)]
        )
    try:
        spec = NodeSpec.model_validate(data)
    except PydanticValidationError as exc:
        raise _finish([*found, *_pydantic_errors(exc, root, file, NodeSpec)]) from None
    if found:
        raise _finish(found)
    problems = _Problems(root, file)
    warnings: list[str] = []
    resolve = _resolver(p.absolute().parent)

    sc: Scenario | None = None
    sc_file = resolve(spec.scenario)
    if not sc_file.is_file():
        problems.add("scenario", f"{spec.scenario} does not exist{_WHERE}")
    else:
        try:
            sc = load_scenario(sc_file, preflight=False)
        except ScenarioErrors as exc:
            problems.elsewhere.extend(exc.errors)
    endpoint = _endpoint(spec.broker, resolve, problems, warnings)
    out = resolve(spec.out)
    out_problem = _out_problem(out)
    if out_problem is not None:
        problems.add("out", f"{spec.out} {out_problem}")
    if sc is None:
        problems.raise_any()
        raise AssertionError("unreachable")  # pragma: no cover

    # the scenario as a node runs it: the algorithm, the wiring, this node
    from fedstrata.scenarios.build import model_of
    from fedstrata.scenarios.wiring import wire_topology

    sc_problems: list[ScenarioError] = []
    # the tensor and deep families' models need the feature counts: checked below, once known
    checks = [(wire_topology, "topology")]
    if not needs_dims(sc.algorithm.name):
        checks.insert(0, (model_of, "algorithm"))
    for check, where in checks:
        try:
            check(sc)
        except ScenarioError as exc:
            sc_problems.extend(exc.errors if isinstance(exc, ScenarioErrors) else [exc])
        except (FedstrataError, ValueError) as exc:
            sc_problems.append(ScenarioError(clip(str(exc), 300), path=where))
    if sc_problems:
        sc_root = _scenario_root(sc_file)
        problems.elsewhere.extend(
            _located(e.reason, e.path, sc_root, str(sc_file)) for e in sc_problems
        )
        problems.raise_any()
    tier = sc.tier_of(spec.node)
    if tier is None:
        problems.add(
            "node", f"no node {show(spec.node)} in the scenario (its nodes: {_ids_summary(sc)})"
        )
        problems.raise_any()
    assert tier is not None
    wiring = wire_topology(sc)
    parent = wiring.parents.get(spec.node)
    role: Role = "client" if tier == "edge" else ("root" if parent is None else "aggregator")
    if role == "client" and spec.data is None:
        problems.add("node", f"{spec.node} is a client: list the views it holds under data")
    if role != "client" and spec.data is not None:
        problems.add(
            "data", f"{spec.node} is an aggregator ({role}): it holds no data; remove data"
        )

    dims: tuple[int, ...] | None = None
    dims_from = "view_dims"
    if spec.view_dims is not None:
        dims = tuple(spec.view_dims)
    else:
        dims_from = "dataset"
        try:
            dims = _dataset_dims(sc)
        except Exception as exc:  # a missing dataset file, a bad parameter: say so here
            problems.add(
                "scenario",
                f"cannot load the scenario's dataset {sc.data.dataset!r} to learn the views' "
                f"feature counts ({clip(str(exc), 200)}); give them as view_dims: [d0, d1, ...]",
            )
    view_ids: tuple[int, ...] = ()
    views: tuple[np.ndarray, ...] = ()
    files: tuple[Path, ...] = ()
    if role == "client" and spec.data is not None:
        view_ids, views, files = _data(spec, dims, resolve, problems)
    seal = _seal(spec, sc, wiring, resolve, problems)
    if dims is not None and needs_dims(sc.algorithm.name):
        try:
            model_of(sc, dims)
        except ScenarioError as exc:
            problems.add("scenario", f"algorithm: {exc.reason}")
    problems.raise_any()
    assert dims is not None
    assert endpoint is not None

    warnings.extend(_fault_warnings(sc, spec.faults))
    return NodeConfig(
        file=p,
        scenario=sc,
        scenario_file=sc_file,
        node_id=spec.node,
        role=role,
        tier=tier,
        parent=parent,
        run=spec.run or sc.name,
        endpoint=endpoint,
        mqtt_protocol=spec.broker.protocol,
        max_attempts=spec.broker.max_attempts,
        dims=dims,
        dims_from=dims_from,
        view_ids=view_ids,
        views=views,
        data_files=files,
        out=out,
        timeout_s=spec.timeout_s,
        seal=seal,
        warnings=tuple(warnings),
        insecure=spec.insecure,
        faults=spec.faults,
    )


def _fault_warnings(sc: Scenario, mode: str) -> list[str]:
    """The scenario's faults a device leaves out: all with ``ignore``, else the link ones."""
    link = mode == "inject"  # a device injects node faults; link faults act on the network
    left = [k for k in sc.faults.kinds() if not link or k in ("partitions", "degradations")]
    why = "link faults act on the network" if link else "faults: ignore"
    return (
        [
            f"the scenario's faults are not injected on this device ({why}); ignored: "
            + ", ".join(left)
        ]
        if left
        else []
    )


def _seal(
    spec: NodeSpec,
    sc: Scenario,
    wiring: Any,
    resolve: Callable[[str], Path],
    problems: _Problems,
) -> Seal | None:
    """The node's seal from its key files (``None``: ``insecure: true``)."""
    if spec.insecure:
        if sc.privacy.sign:
            problems.add(
                "insecure", "the scenario signs its messages (privacy.sign: true): remove it"
            )
        if spec.signing is not None:
            problems.add("insecure", "signing is given too: remove insecure or signing")
        return None
    if spec.signing is None:
        problems.add(
            "node",
            "a node signs its messages: give signing.key and signing.public_keys (written "
            "by `fedstrata keys SCENARIO --out DIR`), or set insecure: true to run "
            "unsigned (anyone who can publish on the broker can then impersonate a node)",
        )
        return None
    keys = None
    try:
        keys = NodeKeys.load(resolve(spec.signing.key))
    except (FedstrataError, OSError) as exc:
        problems.add("signing.key", clip(str(exc), 300))
    public: dict[str, bytes] = {}
    try:
        public = read_public_keys(resolve(spec.signing.public_keys))
    except (FedstrataError, OSError, ValueError) as exc:
        problems.add("signing.public_keys", clip(str(exc), 300))
        return None
    nodes = [n for _, group in wiring.tiers for n in group] + list(wiring.clients)
    missing = [n for n in nodes if n not in public]
    if missing:
        problems.add(
            "signing.public_keys",
            f"no public key for {', '.join(missing[:5])}"
            + (f" and {len(missing) - 5} more" if len(missing) > 5 else ""),
        )
        return None
    if keys is not None and public.get(spec.node) != keys.public_key:
        problems.add(
            "signing.key", f"this key is not {spec.node}'s: its public key differs from the roster"
        )
        return None
    return None if keys is None else Seal(keys, public)


def read_public_keys(path: Path) -> dict[str, bytes]:
    """A public-key roster: a JSON object of node id to 64 hex digits."""
    return load_roster(path)


def load_node_config(path: str | os.PathLike[str]) -> NodeConfig:
    """Read and check a node.yaml; read the node's data files.

    Parameters
    ----------
    path
        The node config. Relative paths in it are read from its folder.

    Returns
    -------
    NodeConfig
        The checked configuration (nothing is written and no broker is contacted).

    Raises
    ------
    ScenarioErrors
        The only exception raised: ``.errors`` lists every problem found, each
        ``file:line: path: reason`` (node.yaml's, or the scenario file's for a
        problem in the scenario); print them with ``e.located()``.

    """
    file = str(path)
    try:
        return _load(Path(path), file)
    except ScenarioErrors:
        raise
    except Exception as exc:  # a bug, but never a traceback for the user
        raise ScenarioErrors(
            [
                ScenarioError(
                    f"internal error while checking the node config ({type(exc).__name__}: "
                    f"{clip(str(exc))}); please report it",
                    file=file,
                    line=1,
                )
            ]
        ) from None
