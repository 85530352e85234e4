"""The identity of a data job: config, declared inputs, exclusion files and source digests.

It decides whether ``--resume`` may reuse checkpoints and is recorded in the published manifest.
Components are compared one by one so a refusal can say *what* changed; executor sources are
found from the import closure of this package (no hand list to go stale); source files are keyed
relative to the folder holding ``corpus_assets`` (or the project root), so a checkout elsewhere
has the same identity. ``identity_digest`` digests all components.

Components and decisions: docs/recipes.md#job-identity
"""

from __future__ import annotations

import ast
import importlib.util
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Optional

from corpus_assets.domain.core.hashing import canonical_digest, sha256_file
from corpus_assets.domain.core.settings import project_root
from corpus_assets.domain.recipe.config import DataJobConfig
from corpus_assets.domain.recipe.plugins import module_file
from corpus_assets.domain.recipe.protocol import RecipeError

__all__ = [
    "executor_source_files",
    "source_key",
    "identity_changes",
    "identity_digest",
    "job_identity",
    "path_digest",
    "source_digests",
]

_PACKAGE = Path(__file__).resolve().parent
_SITE = _PACKAGE.parents[2]  # the folder holding the corpus_assets package
_ROOT_PACKAGE = "corpus_assets"


def path_digest(path: Path, field: str) -> str:
    """sha256 of a file, or of a directory's sorted (relative path, file digest) list."""
    path = Path(path)
    if path.is_file():
        return sha256_file(path)
    if path.is_dir():
        entries = [
            [p.relative_to(path).as_posix(), sha256_file(p)] for p in sorted(path.rglob("*")) if p.is_file()
        ]
        return canonical_digest({"directory": entries})
    raise RecipeError(f"{field}: {path} does not exist")


def source_key(path: Path) -> str:
    """How a source file is named in an identity: relative to the folder holding ``corpus_assets``,
    else to the project root, else absolute."""
    path = Path(path).resolve()
    for base in (_SITE, project_root().resolve()):
        if path.is_relative_to(base):
            return path.relative_to(base).as_posix()
    return str(path)


def source_digests(paths: Iterable[Path], field: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for p in paths:
        p = Path(p).resolve()
        out[source_key(p)] = path_digest(p, field)
    return dict(sorted(out.items()))


def _imported_modules(path: Path, module: str) -> set[str]:
    """The ``corpus_assets`` modules a source file imports (absolute and relative imports)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            names.add(base)
            names.update(f"{base}.{a.name}" for a in node.names)  # `from pkg import module`
    return {n for n in names if n == _ROOT_PACKAGE or n.startswith(_ROOT_PACKAGE + ".")}


def _module_file(name: str) -> Optional[Path]:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):  # `from module import function` names no module
        return None
    return Path(spec.origin).resolve() if spec is not None and spec.origin and spec.origin.endswith(".py") else None


@lru_cache(maxsize=1)
def _executor_closure() -> tuple[Path, ...]:
    todo = [(p, f"{__package__}.{p.stem}") for p in sorted(_PACKAGE.glob("*.py")) if p.name != "__init__.py"]
    seen: dict[Path, str] = {}
    while todo:
        path, module = todo.pop()
        if path in seen or (_PACKAGE / "examples") in path.parents:
            continue
        seen[path] = module
        for name in sorted(_imported_modules(path, module)):
            f = _module_file(name)
            if f is not None and f not in seen:
                todo.append((f, name))
    return tuple(sorted(seen))


def executor_source_files() -> list[Path]:
    """Every ``corpus_assets`` module the executor package imports, directly or through others."""
    return list(_executor_closure())


def _recipe_source_files(config: DataJobConfig, recipe: Any) -> list[Path]:
    files: list[Path] = []
    f = module_file(config.recipe)
    if f is not None:
        files.append(f)
    extra = getattr(recipe, "source_files", None)
    if callable(extra):
        declared = extra()
        if not isinstance(declared, (list, tuple)):
            raise RecipeError("recipe.source_files() must return a list of paths")
        files.extend(Path(p) for p in declared)
    return files


def job_identity(config: DataJobConfig, recipe: Any) -> dict:
    calibrator_sources: dict[str, str] = {}
    if config.calibration is not None:
        f = module_file(config.calibration.implementation)
        if f is not None:
            calibrator_sources = source_digests([f], "calibration.implementation")
    return {
        "config": config.identity(),
        "inputs": {str(p): path_digest(p, f"inputs[{i}]") for i, p in enumerate(config.inputs)},
        "exclude": {str(p): path_digest(p, f"exclude[{i}]") for i, p in enumerate(config.exclude)},
        "recipe_sources": source_digests(_recipe_source_files(config, recipe), "recipe.source_files()"),
        "calibrator_sources": calibrator_sources,
        "executor_sources": source_digests(executor_source_files(), "executor"),
    }


def identity_digest(identity: dict) -> str:
    return canonical_digest(identity)


_LABELS = {
    "config": "config",
    "inputs": "declared input",
    "exclude": "exclude file",
    "recipe_sources": "recipe source",
    "calibrator_sources": "calibrator source",
    "executor_sources": "executor source",
}


def _diff_mapping(label: str, old: dict, new: dict) -> list[str]:
    out: list[str] = []
    for key in sorted(set(old) | set(new)):
        if key not in new:
            out.append(f"{label} {key} was removed")
        elif key not in old:
            out.append(f"{label} {key} was added")
        elif old[key] != new[key]:
            out.append(f"{label} {key} changed")
    return out


def identity_changes(old: Optional[dict], new: dict) -> list[str]:
    """Human-readable differences between two identities (empty when equal)."""
    if not isinstance(old, dict):
        return ["the stored job identity is missing or unreadable"]
    changes: list[str] = []
    for component, label in _LABELS.items():
        a, b = old.get(component), new.get(component)
        if a == b:
            continue
        if component == "config" and isinstance(a, dict) and isinstance(b, dict):
            fields = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
            changes.append(f"config changed (field(s): {', '.join(fields)})")
        elif isinstance(a, dict) and isinstance(b, dict):
            changes.extend(_diff_mapping(label, a, b))
        else:
            changes.append(f"{label}s changed")
    return changes
