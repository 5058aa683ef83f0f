"""Griffe extension: the docstrings' Sphinx markup read as Markdown on the site.

fedstrata's docstrings are numpydoc with Sphinx roles (``:func:`~fedstrata.api.run```)
and ``::`` before literal blocks, which mkdocstrings would show verbatim. A role
becomes inline code naming its target (``~`` keeps the last part, as Sphinx does);
a paragraph's trailing ``::`` becomes ``:`` (the indented block after it is code in
Markdown already). Roles become code rather than links because many name objects
the reference does not document (private helpers, the orchestration modules), and
a link to an undocumented object would fail the strict build.
"""

from __future__ import annotations

import re
from typing import Any

from griffe import Extension

_ROLE = re.compile(r":(?:py:)?[a-z]+:`(~?)([^`<]+?)(?:\s*<([^>`]+)>)?`")
_LITERAL_LINE = re.compile(r"^[ \t]*::[ \t]*$", re.M)
_LITERAL_END = re.compile(r"(\S)::[ \t]*$", re.M)


def _role(m: re.Match[str]) -> str:
    tilde, text, target = m.group(1), m.group(2).strip(), m.group(3)
    if target is not None:  # :role:`shown text <target>`
        return f"`{text}`"
    return f"`{text.rsplit('.', 1)[-1] if tilde else text}`"


def markdown(doc: str) -> str:
    """A Sphinx-flavoured docstring in the Markdown mkdocstrings renders."""
    doc = _ROLE.sub(_role, doc)
    doc = _LITERAL_LINE.sub("", doc)
    return _LITERAL_END.sub(r"\1:", doc)


class SphinxRoles(Extension):
    """Rewrite every docstring as it is loaded (see the module docstring)."""

    def on_instance(self, *, obj: Any, **kwargs: Any) -> None:
        """Convert ``obj``'s docstring, if it has one."""
        if obj.docstring is not None:
            obj.docstring.value = markdown(obj.docstring.value)
