"""Resolving ``module:callable`` factories and detecting a recipe's optional capabilities.

Decisions
---------
* A factory spec is ``module:callable`` (``callable`` may be dotted: ``module:Class.create``),
  imported with ``importlib`` and called as ``factory(**params)``. Import or call failures are
  ``RecipeError`` naming the config field (``recipe`` / ``calibration.implementation``).
* Optional protocols are all-or-nothing: a recipe with *some* of ``generation_shards`` /
  ``generate_shard`` (or of ``selection_policy`` / ``rank`` / ``finalize_selection``) is an error
  naming the missing method, not a silent fallback — a half-implemented capability is a bug.
* ``module_file(spec)`` is the source file of the factory's module; it is digested into the job
  identity together with the recipe's ``source_files()``.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any, Callable

from corpus_assets.domain.recipe.protocol import RecipeError

__all__ = [
    "RANKED_METHODS",
    "REQUIRED_METHODS",
    "SHARDED_METHODS",
    "create_recipe",
    "is_ranked",
    "is_sharded",
    "load_callable",
    "module_file",
]

REQUIRED_METHODS = ("generate", "clean", "score", "select", "training_row")
SHARDED_METHODS = ("generation_shards", "generate_shard")
RANKED_METHODS = ("selection_policy", "rank", "finalize_selection")


def load_callable(spec: str, field: str = "recipe") -> Callable[..., Any]:
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise RecipeError(f"{field}: expected 'module:callable', got {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise RecipeError(f"{field}: cannot import module {module_name!r}: {exc}") from None
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise RecipeError(f"{field}: module {module_name!r} has no attribute {attr!r}") from None
    if not callable(obj):
        raise RecipeError(f"{field}: {spec!r} is not callable")
    return obj


def module_file(spec: str) -> Path | None:
    """The source file of the module named in ``spec`` (None for a module without a file)."""
    module = importlib.import_module(spec.partition(":")[0])
    f = getattr(module, "__file__", None)
    return Path(f).resolve() if f else None


def _capability(recipe: Any, methods: tuple[str, ...], name: str) -> bool:
    present = [m for m in methods if callable(getattr(recipe, m, None))]
    if present and len(present) != len(methods):
        missing = [m for m in methods if m not in present]
        raise RecipeError(
            f"recipe implements {', '.join(present)} but not {', '.join(missing)}: "
            f"{name} needs all of {', '.join(methods)}"
        )
    return bool(present)


def is_sharded(recipe: Any) -> bool:
    return _capability(recipe, SHARDED_METHODS, "sharded generation")


def is_ranked(recipe: Any) -> bool:
    return _capability(recipe, RANKED_METHODS, "ranked selection")


def create_recipe(spec: str, params: dict) -> Any:
    """``factory(**params)``, checked to have the required recipe methods."""
    factory = load_callable(spec, "recipe")
    try:
        recipe = factory(**dict(params))
    except TypeError as exc:
        raise RecipeError(f"recipe: factory {spec!r} rejected params: {exc}") from None
    missing = [m for m in REQUIRED_METHODS if not callable(getattr(recipe, m, None))]
    if missing:
        raise RecipeError(f"recipe: object from {spec!r} lacks method(s) {', '.join(missing)}")
    is_sharded(recipe)
    is_ranked(recipe)
    return recipe
