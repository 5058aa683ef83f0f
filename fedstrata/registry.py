"""The composition root: registers the built-in algorithm plug-ins and protocol kinds.

The node core (:mod:`fedstrata.nodes`) knows no algorithm family and no protocol kind:
it looks both up in registries that this module fills. Whatever builds nodes (the
simulator's and the MQTT runner's builders, ``fedstrata node``) imports it first.

Besides the built-ins it registers every *installed* plug-in: an entry point of group
``fedstrata.plugins`` (in the ``pyproject.toml`` of another package) naming an
:class:`~fedstrata.plugins.spec.AlgorithmPlugin` or a
:class:`~fedstrata.protocols.kind.ProtocolKind`::

    [project.entry-points."fedstrata.plugins"]
    spherical-kmeans = "my_package.spherical:PLUGIN"

so that ``fedstrata validate``, ``fedstrata run`` (both transports, worker processes
included) and ``fedstrata node`` know it without a change to fedstrata.
"""

from __future__ import annotations

from importlib.metadata import entry_points

from fedstrata.errors import PluginError
from fedstrata.plugins.deep_spec import DEEP
from fedstrata.plugins.multiview_spec import MULTIVIEW
from fedstrata.plugins.spec import AlgorithmPlugin, register_algorithm_plugin
from fedstrata.plugins.tensor_spec import TENSOR
from fedstrata.protocols.asynchronous import ASYNC
from fedstrata.protocols.buffered import BUFFERED
from fedstrata.protocols.kind import ProtocolKind, protocol_kinds, register_kind
from fedstrata.protocols.network_aware import ADAPTIVE
from fedstrata.protocols.sync import SYNC

__all__ = ["ENTRY_POINT_GROUP", "INSTALLED", "load_installed_plugins"]

#: The entry-point group of installed plug-ins.
ENTRY_POINT_GROUP = "fedstrata.plugins"

register_kind(SYNC)
register_kind(ASYNC)
register_kind(BUFFERED)
register_kind(ADAPTIVE)

# algorithm plug-ins (declaration and node-side factory); the first is the default
register_algorithm_plugin(MULTIVIEW)
register_algorithm_plugin(TENSOR)
register_algorithm_plugin(DEEP)


def _register(name: str, value: str, obj: object) -> None:
    where = f"plug-in {name!r} ({value}, entry point group {ENTRY_POINT_GROUP})"
    if isinstance(obj, AlgorithmPlugin):
        try:
            register_algorithm_plugin(obj)
        except ValueError as exc:
            raise PluginError(f"{where}: {exc}") from None
    elif isinstance(obj, ProtocolKind):
        if obj.name in protocol_kinds():
            raise PluginError(f"{where}: protocol kind {obj.name!r} is registered already")
        register_kind(obj)
    else:
        raise PluginError(
            f"{where} is a {type(obj).__name__}, not an AlgorithmPlugin or a ProtocolKind"
        )


def load_installed_plugins() -> tuple[str, ...]:
    """Register every installed plug-in; return their entry-point names.

    Raises
    ------
    PluginError
        An entry point that does not import, names something else than a plug-in or
        a kind, or takes a name that is registered already (one line, naming it).

    """
    names = []
    for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        try:
            obj = ep.load()
        except Exception as exc:  # any failure of somebody else's import: say whose
            raise PluginError(
                f"plug-in {ep.name!r} ({ep.value}, entry point group {ENTRY_POINT_GROUP}) "
                f"does not load: {type(exc).__name__}: {exc}"
            ) from exc
        _register(ep.name, ep.value, obj)
        names.append(ep.name)
    return tuple(names)


#: The entry-point names of the installed plug-ins registered at import.
INSTALLED = load_installed_plugins()
