"""The README is the quick start and the way into the documentation site (docs/, mkdocs.yml).

``make test-docs`` (``mkdocs build --strict``) checks the links between the site's pages;
the README is not one of them, so its own links are checked here: every relative link
names a file of the repository and, with ``#anchor``, a heading of that file, the anchors
computed as the site computes them (Python-Markdown's ``toc`` with ``pymdownx.slugs``, the
lower-case GitHub style mkdocs.yml configures). And the README keeps what CI and a newcomer
rely on: at most 300 lines, ``make run`` and ``make test`` as lines to paste, the latter
being what ``.ci/run`` runs.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import markdown
from pymdownx.slugs import slugify

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"

#: ``[text](target)`` outside code; the target has no spaces.
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCED = re.compile(r"^```.*?^```", re.S | re.M)


def _links(text: str) -> list[str]:
    prose = re.sub(r"`[^`\n]*`", "", FENCED.sub("", text))
    return LINK.findall(prose)


@cache
def _anchors(path: Path) -> frozenset[str]:
    """The ids of ``path``'s headings, as the documentation site gives them."""
    md = markdown.Markdown(
        extensions=["toc", "pymdownx.superfences"],
        extension_configs={"toc": {"slugify": slugify(case="lower")}},
    )
    md.convert(path.read_text())

    def walk(tokens):
        for token in tokens:
            yield token["id"]
            yield from walk(token["children"])

    return frozenset(walk(md.toc_tokens))


def test_every_relative_link_of_the_readme_resolves():
    links = [link for link in _links(README.read_text()) if not re.match(r"[a-z]+:", link)]
    assert len(links) >= 20  # the page table of "Where to read on" at least
    broken = []
    for link in links:
        target, _, anchor = link.partition("#")
        path = (README.parent / target).resolve() if target else README
        if not path.is_file():
            broken.append(f"{link}: no file {target}")
        elif anchor and anchor not in _anchors(path):
            broken.append(f"{link}: no heading #{anchor} in {path.relative_to(ROOT)}")
    assert broken == []


def test_the_readme_links_every_page_of_the_site():
    pages = {path.relative_to(ROOT).as_posix() for path in (ROOT / "docs").glob("*.md")}
    linked = {link.partition("#")[0] for link in _links(README.read_text())}
    assert pages - linked == set()


def test_the_readme_is_a_quick_start_with_the_two_commands():
    text = README.read_text()
    assert len(text.splitlines()) <= 300
    blocks = [block.strip("`\n") for block in FENCED.findall(text)]
    assert "make run" in blocks and "make test" in blocks
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert "make test" in [line.strip() for line in ci]
