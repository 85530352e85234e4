"""Every error the domain raises on purpose derives from one base, CorpusError, and keeps its
standard base (ValueError / RuntimeError), so both ``except CorpusError`` and existing handlers work."""

import importlib
import inspect
from pathlib import Path

from corpus_assets.domain.core.errors import CorpusError

DOMAIN = Path(__file__).resolve().parents[2] / "corpus_assets" / "domain"
# signals between a recipe and the executor, not failures: "give me another batch"
CONTROL_FLOW = {"corpus_assets.domain.recipe.protocol.InsufficientDataError"}


def _domain_modules():
    for path in sorted(DOMAIN.rglob("*.py")):
        parts = path.relative_to(DOMAIN).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        yield importlib.import_module(".".join(("corpus_assets", "domain", *parts)))


def test_every_public_domain_error_is_a_corpus_error():
    errors = {}
    for module in _domain_modules():
        for name, obj in vars(module).items():
            if inspect.isclass(obj) and issubclass(obj, Exception) and obj.__module__ == module.__name__ \
                    and name.endswith("Error") and not name.startswith("_") and obj is not CorpusError \
                    and f"{module.__name__}.{name}" not in CONTROL_FLOW:
                errors[f"{module.__name__}.{name}"] = obj
    assert len(errors) >= 30, sorted(errors)
    strays = sorted(name for name, cls in errors.items() if not issubclass(cls, CorpusError))
    assert not strays, f"derive these from corpus_assets.domain.core.errors.CorpusError: {strays}"
    # and each keeps a standard base its callers may catch
    assert all(issubclass(cls, (ValueError, RuntimeError)) for cls in errors.values()), [
        n for n, c in errors.items() if not issubclass(c, (ValueError, RuntimeError))]
