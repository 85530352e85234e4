"""The configuration of one recipe data job (``DataJobConfig``) and loading it from YAML / JSON.

Every model forbids unknown fields. ``load_config`` resolves ``inputs`` / ``exclude`` relative to
the config file (a config built in Python: to the working directory, ``resolved()``); plugin
params are left alone. Budgets are ``max_batches`` and ``max_candidates``; execution settings are
part of the identity for resume but never change the dataset.

Decisions: docs/recipes.md#configuration
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from corpus_assets.domain.core.config_files import ConfigError, format_validation_error, read_yaml
from corpus_assets.domain.recipe.protocol import RecipeError

__all__ = [
    "CalibrationConfig",
    "DataJobConfig",
    "ExecutionConfig",
    "JobConfigError",
    "load_config",
]


class JobConfigError(ConfigError, RecipeError):
    """A data job configuration that does not validate; the message names the file and field."""


def _check_spec(value: str, field_name: str) -> str:
    module, sep, attr = value.partition(":")
    if not sep or not module.strip() or not attr.strip():
        raise ValueError(f"{field_name} must be 'module:callable', got {value!r}")
    return value


class ExecutionConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_workers: int = Field(1, ge=1)
    batch_size: int = Field(256, ge=1)
    backend: Literal["thread", "process"] = "thread"
    max_retries: int = Field(0, ge=0)
    retry_delay: float = Field(1.0, ge=0)
    prefetch: Optional[int] = Field(None, ge=1)

    @property
    def prefetch_chunks(self) -> int:
        return self.prefetch if self.prefetch is not None else 2 * self.max_workers


class CalibrationConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    implementation: str
    repeats: int = Field(1, ge=1)
    params: dict[str, Any] = Field(default_factory=dict)

    @field_validator("implementation")
    @classmethod
    def _implementation(cls, v: str) -> str:
        return _check_spec(v, "implementation")


class DataJobConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    recipe: str
    params: dict[str, Any] = Field(default_factory=dict)
    target_count: int = Field(..., gt=0)
    purpose: Literal["harness", "model", "joint"] = "joint"
    seed: int = 0
    max_batches: int = Field(1, ge=1)
    max_candidates: Optional[int] = Field(None, ge=1)
    inputs: list[Path] = Field(default_factory=list)
    exclude: list[Path] = Field(default_factory=list)
    calibration: Optional[CalibrationConfig] = None
    execution: ExecutionConfig = Field(default_factory=ExecutionConfig)

    @field_validator("recipe")
    @classmethod
    def _recipe(cls, v: str) -> str:
        return _check_spec(v, "recipe")

    def resolved(self, base_dir: Path | str | None = None) -> "DataJobConfig":
        """A copy whose ``inputs`` / ``exclude`` are absolute (relative ones joined to ``base_dir``,
        default the working directory)."""
        base = Path(base_dir) if base_dir is not None else Path.cwd()

        def fix(paths: list[Path]) -> list[Path]:
            return [(p if p.is_absolute() else base / p).resolve() for p in paths]

        return self.model_copy(update={"inputs": fix(self.inputs), "exclude": fix(self.exclude)})

    def identity(self) -> dict:
        """The JSON form that is recorded in ``config.json`` / the manifest and compared on resume."""
        return self.model_dump(mode="json")


def load_config(path: Path | str) -> DataJobConfig:
    """Read a YAML or JSON job config; paths in ``inputs`` / ``exclude`` are relative to it."""
    path = Path(path)
    try:
        data = read_yaml(path)
    except ConfigError as exc:
        raise JobConfigError(str(exc)) from None
    if not isinstance(data, dict):
        raise JobConfigError(f"{path}: expected a mapping at top level")
    try:
        config = DataJobConfig.model_validate(data)
    except ValidationError as exc:
        raise JobConfigError(format_validation_error(str(path), exc)) from None
    return config.resolved(path.resolve().parent)
