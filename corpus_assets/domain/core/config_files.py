"""Loading YAML config files: environment interpolation in values and errors that name the field.

Values may reference environment variables as ``${NAME}`` or ``${NAME:-default}``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence, TypeVar

import yaml
from pydantic import BaseModel, ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError

from corpus_assets.domain.core.errors import CorpusError

_ENV_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
# discriminator tags pydantic puts into union error locations; they are not field names
_UNION_TAGS = {"http_crawl", "local_dir", "jsonl", "parquet", "warc"}

M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class ConfigProblem:
    """One problem of a configuration file: the dotted field path (``(top level)`` for the whole
    file) and what is wrong with it."""

    field: str  # "" when the problem is the file itself (unreadable, not YAML)
    message: str


class ConfigError(CorpusError, ValueError):
    """A configuration file that does not validate; the message names the file and field.

    ``origin`` is the file (or file and section) the error is about and ``problems`` the
    structured field errors when there are any (empty for e.g. an unreadable file); ``str()`` is
    the human-readable message, unchanged by them.
    """

    def __init__(self, message: str, *, origin: Optional[str] = None, problems: Sequence[ConfigProblem] = ()):
        super().__init__(message)
        self.origin = origin
        self.problems: tuple[ConfigProblem, ...] = tuple(problems)

    def problem_lines(self, origin: Optional[str] = None) -> list[str]:
        """One line per problem, ``origin: field: message`` (``origin`` defaults to the error's own);
        an error without structured problems is one line, ``origin: message``."""
        where = origin if origin is not None else self.origin
        prefix = f"{where}: " if where else ""
        if self.problems:
            return [f"{prefix}{p.field + ': ' if p.field else ''}{_one_line(p.message)}" for p in self.problems]
        text = str(self)
        if self.origin and text.startswith(f"{self.origin}: "):
            text = text[len(self.origin) + 2:]
        return [f"{prefix}{_one_line(text)}"]


def _one_line(text: str) -> str:
    return " ".join(text.split())


def expand_env(text: str, env: Optional[dict[str, str]] = None) -> str:
    env = dict(os.environ if env is None else env)

    def sub(m: re.Match) -> str:
        name, default = m.group(1), m.group(2)
        if name in env:
            return env[name]
        if default is not None:
            return default
        raise ConfigError(f"environment variable ${{{name}}} is not set and has no default")

    return _ENV_RE.sub(sub, text)


def expand_values(data, env: dict[str, str]):
    """Interpolate ${VAR} in string values only (comments and keys are left alone)."""
    if isinstance(data, str):
        return expand_env(data, env)
    if isinstance(data, list):
        return [expand_values(v, env) for v in data]
    if isinstance(data, dict):
        return {k: expand_values(v, env) for k, v in data.items()}
    return data


def validation_problems(exc: ValidationError) -> list[ConfigProblem]:
    """The errors of ``exc`` as (dotted field path, message) problems."""
    problems = []
    for err in exc.errors():
        parts: list[str] = []
        for part in err["loc"]:
            if isinstance(part, int):
                parts.append(f"[{part}]")
            elif part in _UNION_TAGS:
                continue
            else:
                parts.append(("." if parts else "") + str(part))
        problems.append(ConfigProblem("".join(parts) or "(top level)", err["msg"]))
    return problems


def format_validation_error(origin: str, exc: ValidationError) -> str:
    lines = [f"{origin}: invalid configuration"]
    lines.extend(f"  {p.field}: {p.message}" for p in validation_problems(exc))
    return "\n".join(lines)


def field_errors(title: str, errors: Sequence[tuple[tuple, str, object]]) -> ValidationError:
    """A ``ValidationError`` for cross-field rules checked after a model validated: each error is
    (location inside the model, message, offending value). Raised from a ``mode="wrap"`` model
    validator, pydantic keeps the locations, nested under the model's own field path."""
    return ValidationError.from_exception_data(title, [
        InitErrorDetails(type=PydanticCustomError("config_rule", "{message}", {"message": msg}), loc=tuple(loc), input=value)
        for loc, msg, value in errors
    ])


def validate(model: type[M], data: object, origin: str, *, context: Optional[dict] = None) -> M:
    """``model`` validated from ``data``; a ``ConfigError`` naming ``origin`` and each field otherwise.
    ``context`` is passed to the model's validators (pydantic validation context)."""
    if not isinstance(data, dict):
        raise ConfigError(f"{origin}: expected a mapping at top level", origin=origin,
                          problems=[ConfigProblem("(top level)", "expected a mapping")])
    try:
        return model.model_validate(data, context=context)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(origin, exc), origin=origin, problems=validation_problems(exc)) from None


def read_yaml(path: Path | str, env: Optional[dict[str, str]] = None) -> object:
    """Parse a YAML file and interpolate environment variables in its values."""
    path = Path(path)
    try:
        raw = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:  # a binary file is a config error too
        raise ConfigError(f"{path}: cannot read config file: {exc}", origin=str(path),
                          problems=[ConfigProblem("", f"cannot read config file: {exc}")]) from None
    try:
        data = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}", origin=str(path),
                          problems=[ConfigProblem("", f"not valid YAML: {exc}")]) from None
    env = dict(os.environ if env is None else env)
    from corpus_assets.domain.core.settings import corpus_home, is_url

    env.setdefault("CORPUS_HOME", str(corpus_home()))
    if "CORPUS_LOCAL" not in env:  # the local root, also when CORPUS_HOME is an object-store URL
        env["CORPUS_LOCAL"] = str(corpus_home()) if is_url(env["CORPUS_HOME"]) else env["CORPUS_HOME"]
    return expand_values(data, env)
