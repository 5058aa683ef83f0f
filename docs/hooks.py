"""MkDocs hooks: included repository files' links, and the tests' code-fence tags.

Links to repository files that the site includes point at their page.

The Markdown files keep links that work when read in the repository
(``../benchmarks/README.md`` from ``docs/``, ``benchmarks/README.md`` from README.md,
which ``docs/index.md`` includes); on the site those files are pages of their own, so
such a link is pointed at the page. Every other relative link is left for MkDocs to
check (strict mode fails on one that resolves nowhere).

Code fences tagged ``python example`` (or ``python example-mqtt``) are the blocks
tests/test_architecture_example.py executes; Markdown takes only one word after the
fence, so the site shows them as plain ``python`` blocks.
"""

from __future__ import annotations

import posixpath
import re
from typing import Any

#: Repository file (from the repository root) -> the docs page that includes it.
INCLUDED = {"benchmarks/README.md": "benchmarks.md", "README.md": "index.md"}

_TEST_FENCE = re.compile(r"^```python example(?:-mqtt)?$", re.M)
_LINK = re.compile(r"(\]\()([^)\s#]+)(#[^)\s]*)?(\))")


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    """Point links to included repository files at their pages; untag test fences."""
    here = posixpath.dirname("docs/" + page.file.src_uri)  # the page's folder, from the root

    def repoint(m: re.Match[str]) -> str:
        target = m.group(2)
        if "://" in target or target.startswith(("/", "mailto:")):
            return m.group(0)
        resolved = posixpath.normpath(posixpath.join(here, target))
        page_uri = INCLUDED.get(resolved)
        if page_uri is None:
            return m.group(0)
        new = posixpath.relpath("docs/" + page_uri, here)
        return f"{m.group(1)}{new}{m.group(3) or ''}{m.group(4)}"

    markdown = _TEST_FENCE.sub("```python", markdown)
    return _LINK.sub(repoint, markdown)
