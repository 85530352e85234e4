"""The pure domain modules import without Dagster, so users can use them in a notebook."""

import subprocess
import sys
from pathlib import Path

DOMAIN = Path(__file__).resolve().parents[2] / "corpus_assets" / "domain"


def test_domain_modules_do_not_import_dagster():
    modules = sorted(
        ".".join(p.relative_to(DOMAIN).with_suffix("").parts) for p in DOMAIN.rglob("*.py") if p.stem != "__init__"
    )
    assert len(modules) > 10 and any(m.startswith("recipe.") for m in modules)
    code = (
        "import importlib, sys\n"
        f"for m in {modules!r}:\n"
        "    importlib.import_module('corpus_assets.domain.' + m)\n"
        "bad = sorted(n for n in sys.modules if n == 'dagster' or n.startswith('dagster.') or n.startswith('dagster_'))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"domain modules pulled in: {out.stdout.strip()}"
