"""The docs the code points at exist: every ``docs/<page>.md#<anchor>`` named in the package's
source is a page with that heading, every folder README.md and docs/architecture.md name as a
layer's home exists, and no module of corpus_assets/domain sits outside a subpackage."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS_REF = re.compile(r"docs/([\w-]+\.md)(?:#([\w-]+))?")
FOLDER_REF = re.compile(r"`(corpus_assets/domain/[\w/]+/)`")


def _slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    out = set()
    in_code = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and line.startswith("#"):
            out.add(_slug(line.lstrip("#")))
    return out


def test_every_docs_reference_in_the_code_resolves():
    sources = [p for d in ("corpus_assets", "sensors", "resources") for p in (ROOT / d).rglob("*.py")]
    broken = []
    for path in sources:
        for page, anchor in DOCS_REF.findall(path.read_text(encoding="utf-8")):
            target = ROOT / "docs" / page
            if not target.is_file():
                broken.append(f"{path.relative_to(ROOT)}: docs/{page} does not exist")
            elif anchor and anchor not in _anchors(target):
                broken.append(f"{path.relative_to(ROOT)}: docs/{page} has no heading #{anchor}")
    assert not broken, "\n".join(sorted(set(broken)))


def test_the_folders_named_as_each_layers_home_exist():
    named = set()
    for doc in (ROOT / "README.md", ROOT / "docs" / "architecture.md"):
        named |= set(FOLDER_REF.findall(doc.read_text(encoding="utf-8")))
    assert len(named) >= 8, named
    missing = sorted(f for f in named if not (ROOT / f).is_dir())
    assert not missing, missing


def test_no_domain_module_sits_outside_a_subpackage():
    domain = ROOT / "corpus_assets" / "domain"
    loose = sorted(p.name for p in domain.glob("*.py") if p.name != "__init__.py")
    assert loose == [], loose
    assert all((d / "__init__.py").is_file() for d in domain.iterdir() if d.is_dir() and d.name != "__pycache__")
