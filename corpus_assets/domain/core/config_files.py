"""Loading YAML config files: environment interpolation in values and errors that name the field.

Values may reference environment variables as ``${NAME}`` or ``${NAME:-default}``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Optional, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

_ENV_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
# discriminator tags pydantic puts into union error locations; they are not field names
_UNION_TAGS = {"http_crawl", "local_dir", "jsonl", "parquet", "warc"}

M = TypeVar("M", bound=BaseModel)


class ConfigError(ValueError):
    """A configuration file that does not validate; the message names the file and field."""


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


def format_validation_error(origin: str, exc: ValidationError) -> str:
    lines = [f"{origin}: invalid configuration"]
    for err in exc.errors():
        parts: list[str] = []
        for part in err["loc"]:
            if isinstance(part, int):
                parts.append(f"[{part}]")
            elif part in _UNION_TAGS:
                continue
            else:
                parts.append(("." if parts else "") + str(part))
        lines.append(f"  {''.join(parts) or '(top level)'}: {err['msg']}")
    return "\n".join(lines)


def validate(model: type[M], data: object, origin: str) -> M:
    if not isinstance(data, dict):
        raise ConfigError(f"{origin}: expected a mapping at top level")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(origin, exc)) from None


def read_yaml(path: Path | str, env: Optional[dict[str, str]] = None) -> object:
    """Parse a YAML file and interpolate environment variables in its values."""
    path = Path(path)
    try:
        raw = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config file: {exc}") from None
    try:
        data = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    env = dict(os.environ if env is None else env)
    from corpus_assets.domain.core.settings import corpus_home, is_url

    env.setdefault("CORPUS_HOME", str(corpus_home()))
    if "CORPUS_LOCAL" not in env:  # the local root, also when CORPUS_HOME is an object-store URL
        env["CORPUS_LOCAL"] = str(corpus_home()) if is_url(env["CORPUS_HOME"]) else env["CORPUS_HOME"]
    return expand_values(data, env)
