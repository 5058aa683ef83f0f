"""Algorithm plug-ins shipped with fedstrata.

Each family has its node-side half (:mod:`.multiview`, :mod:`.tensor`, :mod:`.deep`:
the :class:`~fedstrata.nodes.algorithm.Algorithm` and its learners) and a declaration
(:mod:`.multiview_spec`, :mod:`.tensor_spec`, :mod:`.deep_spec`: settings,
capabilities, model, records; the interface is :mod:`.spec`). Importing this package
registers nothing: the composition root (:mod:`fedstrata.registry`) does, one line per
family. See ``docs/architecture.md`` for a worked example of adding one.
"""
