"""``QualityConfig``: the whole quality policy, assembled from the filter registry.

Each filter's config model is a section under the filter's name (the ``quality:`` block of
``curation.yaml``); ``apply`` maps ``<schema_type>/<domain>`` (either may be ``*``) to the
filters that run, ``overrides`` replaces a filter's thresholds for one apply key. A record uses
the first key of ``<type>/<domain>``, ``<type>/*``, ``*/<domain>``, ``*/*`` present, and every
type/domain must resolve. Giving ``apply`` or ``overrides`` replaces the default map as a whole;
the default map is what the filters' ``default_apply`` declare.

``profiles`` (web, documentation, code, conversation: a source's ``profile`` in sources.yaml)
put thresholds on top of the overrides, per apply key and filter, for the records of sources
with that profile: ``profiles: {documentation: {"document/prose": {c4: {filter_curly_bracket:
false}}}}``. ``web`` is empty by default (the published thresholds). A profile given replaces
that profile's default map; the profiles not given keep theirs (the filters' ``default_profiles``).

Versions: every filter has its own (``filter_version``: the code version and the effective
thresholds it ran with, plus the tokenizer settings for text filters), and the policy has one
(``quality_policy_version``: code version, every threshold of every filter, the apply map, the
effective overrides and the effective thresholds of every profile). Everything is validated and
compiled once, when the config is built; judging only looks compiled plans up.

``quality_config_model(filters)`` builds the config model for any filter list (the shipped one
is ``registry.FILTERS``), so a filter can be tried without touching the registry.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Mapping, Optional, Sequence

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, create_model, field_validator, model_validator

from corpus_assets.domain.canonical.records import SCHEMA_VERSIONS
from corpus_assets.domain.core.hashing import canonical_digest
from corpus_assets.domain.curate.quality.base import (
    DEFAULT_KEYS,
    QUALITY_CODE_VERSION,
    QUALITY_PROFILES,
    WEB,
    FilterConfig,
    QualityFilter,
    RecordCheck,
    TextCheck,
    check_profile,
)
from corpus_assets.domain.curate.quality.registry import FILTERS
from corpus_assets.domain.ingest.sources_config import QualityProfile

__all__ = [
    "QualityConfigBase",
    "QualityConfig",
    "quality_config_model",
    "FILTER_ORDER",
    "TEXT_FILTERS",
    "REASON_CODES",
    "DEFAULT_APPLY",
    "DEFAULT_OVERRIDES",
    "DEFAULT_PROFILES",
    "Plan",
    "filter_version",
    "quality_policy_version",
]

_DOMAINS = ("prose", "code")
_KEY_RE = re.compile(r"^([a-z*][a-z0-9_]*|\*)/([a-z*][a-z0-9_]*|\*)$")


@dataclass(frozen=True)
class Plan:
    """The compiled filters of one apply key (or one ``judge_text`` request)."""

    key: str
    filters: tuple[str, ...]  # enabled filters, in registry order
    configs: dict[str, FilterConfig]  # effective config per filter
    versions: dict[str, str]  # filter version per filter
    record_checks: tuple[tuple[RecordCheck, FilterConfig, str], ...]  # (check, config, version)
    text_checks: tuple[tuple[TextCheck, FilterConfig, str], ...]


class QualityConfigBase(BaseModel):
    """What every quality config has; ``quality_config_model`` adds one section per filter and
    the ``apply`` / ``overrides`` maps typed with the filter names."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    FILTERS: ClassVar[tuple[QualityFilter, ...]] = ()
    FILTER_ORDER: ClassVar[tuple[str, ...]] = ()  # the order filters run in, whatever order a config lists them in
    TEXT_FILTERS: ClassVar[tuple[str, ...]] = ()  # the filters with a text check (judge_text takes these)
    REASON_CODES: ClassVar[frozenset[str]] = frozenset()
    DEFAULT_PROFILES: ClassVar[dict[str, dict[str, dict[str, dict[str, Any]]]]] = {}

    unspaced_script_share: float = Field(0.3, ge=0, le=1)  # unspaced mode from this share of characters
    unspaced_ngram_scale: int = Field(2, ge=1, le=8)  # in unspaced mode an n-gram rule reads n*scale characters

    if TYPE_CHECKING:  # declared by quality_config_model, with the filter names as a Literal
        apply: dict[str, list[str]]
        overrides: dict[str, dict[str, dict[str, Any]]]
        profiles: dict[str, dict[str, dict[str, dict[str, Any]]]]

    _plans: dict[tuple[str, Optional[str]], Plan] = PrivateAttr(default_factory=dict)  # (apply key, profile)
    _by_type: dict[tuple[str, str, str], Plan] = PrivateAttr(default_factory=dict)
    _policy_version: str = PrivateAttr(default="")
    _text_plans: dict[tuple, Plan] = PrivateAttr(default_factory=dict)

    @field_validator("apply", check_fields=False)
    @classmethod
    def _fixed_order(cls, v: dict[str, list[str]]) -> dict[str, list[str]]:
        for key, names in v.items():
            if len(set(names)) != len(names):
                raise ValueError(f"apply key {key!r}: a filter is listed twice")
        # filters always run in FILTER_ORDER; store them so, so equal policies digest equally
        return {key: sorted(names, key=cls.FILTER_ORDER.index) for key, names in v.items()}

    @model_validator(mode="before")
    @classmethod
    def _profiles_over_defaults(cls, data: Any) -> Any:
        """A profile given replaces that profile's default map; the others keep their defaults,
        without the entries a given ``apply`` map does not run (so a custom ``apply`` needs no
        ``profiles`` of its own; a profile given is checked strictly)."""
        if not isinstance(data, Mapping) or not cls.DEFAULT_PROFILES:
            return data
        given = data.get("profiles")
        if given is not None and not isinstance(given, Mapping):
            return data  # the field's own validation reports it
        given = given or {}
        apply = data.get("apply")
        runs = (lambda key, name: True) if not isinstance(apply, Mapping) else (
            lambda key, name: isinstance(apply.get(key), (list, tuple)) and name in apply[key])
        merged: dict[str, Any] = {}
        for profile, keys in cls.DEFAULT_PROFILES.items():
            if profile in given:
                continue
            merged[profile] = {
                key: kept for key, per_filter in keys.items()
                if (kept := {name: _copy_nested(v) for name, v in per_filter.items() if runs(key, name)})
            }
        return {**data, "profiles": {**merged, **given}}

    @model_validator(mode="after")
    def _check_apply(self) -> "QualityConfigBase":
        by_name = {f.name: f for f in self.FILTERS}
        for key, names in self.apply.items():
            m = _KEY_RE.match(key)
            if m is None:
                raise ValueError(f"apply key {key!r} must look like '<schema_type>/<domain>' ('*' allowed)")
            stype, domain = m.groups()
            if stype != "*" and stype not in SCHEMA_VERSIONS:
                raise ValueError(f"apply key {key!r}: unknown schema type {stype!r}")
            if domain != "*" and domain not in _DOMAINS:
                raise ValueError(f"apply key {key!r}: unknown domain {domain!r}")
            for name in names:
                only = by_name[name].record_types
                if only and stype not in only:
                    raise ValueError(
                        f"apply key {key!r}: the {name!r} filter only applies to {' / '.join(only)} records"
                    )
        for stype in SCHEMA_VERSIONS:
            for domain in _DOMAINS:
                if _resolve_key(self.apply, stype, domain) is None:
                    raise ValueError(f"apply has no entry for {stype}/{domain} (add it, or '{stype}/*' / '*/*')")
        for key, per_filter in self.overrides.items():
            if key not in self.apply:
                raise ValueError(f"overrides key {key!r} is not an apply key")
            for name, values in per_filter.items():
                self._check_values(f"overrides[{key!r}][{name!r}]", key, name, values)
        for profile, keys in self.profiles.items():
            for key, per_filter in keys.items():
                if key not in self.apply:
                    raise ValueError(f"profiles[{profile!r}] key {key!r} is not an apply key")
                for name, values in per_filter.items():
                    self._check_values(f"profiles[{profile!r}][{key!r}][{name!r}]", key, name,
                                       {**self.overrides.get(key, {}).get(name, {}), **values})
        self._compile()
        return self

    def _check_values(self, where: str, key: str, name: str, values: Mapping[str, Any]) -> None:
        if name not in self.apply[key]:
            raise ValueError(f"{where}: filter does not run for {key!r}")
        base = getattr(self, name)
        try:
            type(base).model_validate({**base.model_dump(), **values})
        except ValidationError as exc:
            fields = ", ".join(".".join(map(str, e["loc"])) + f" ({e['msg']})" for e in exc.errors())
            raise ValueError(f"{where}: {fields}") from None

    def _effective_overrides(self, key: str, profile: Optional[str]) -> dict[str, dict[str, Any]]:
        """The overrides of ``key`` with the profile's on top, per filter."""
        out = {name: dict(v) for name, v in self.overrides.get(key, {}).items()}
        if profile is not None:
            for name, values in self.profiles.get(profile, {}).get(key, {}).items():
                out[name] = {**out.get(name, {}), **values}
        return out

    def _plan(self, key: str, names: Sequence[str], overrides: Mapping[str, Mapping[str, Any]]) -> Plan:
        """The enabled filters among ``names`` with their effective configs and versions."""
        configs: dict[str, FilterConfig] = {}
        versions: dict[str, str] = {}
        record_checks = []
        text_checks = []
        for f in self.FILTERS:
            if f.name not in names:
                continue
            base = getattr(self, f.name)
            values = overrides.get(f.name)
            cfg = type(base).model_validate({**base.model_dump(), **values}) if values else base
            if not cfg.enabled:
                continue
            configs[f.name] = cfg
            versions[f.name] = version = filter_version(f.name, cfg, self)
            if f.check_record is not None:
                record_checks.append((f.check_record, cfg, version))
            if f.check is not None:
                text_checks.append((f.check, cfg, version))
        return Plan(key, tuple(configs), configs, versions, tuple(record_checks), tuple(text_checks))

    def _compile(self) -> None:
        for key, names in self.apply.items():
            self._plans[(key, None)] = base = self._plan(key, names, self._effective_overrides(key, None))
            for profile in QUALITY_PROFILES:
                changed = key in self.profiles.get(profile, {})
                self._plans[(key, profile)] = (
                    self._plan(key, names, self._effective_overrides(key, profile)) if changed else base
                )
        for stype in SCHEMA_VERSIONS:
            for domain in _DOMAINS:
                key = _resolve_key(self.apply, stype, domain)
                assert key is not None  # checked above
                for profile in QUALITY_PROFILES:
                    self._by_type[(stype, domain, profile)] = self._plans[(key, profile)]
        # the digest reads validated values only (an override written 1 or 1.0 digests the same)
        body = {
            "code": QUALITY_CODE_VERSION,
            "unspaced_script_share": self.unspaced_script_share,
            "unspaced_ngram_scale": self.unspaced_ngram_scale,
            "sections": {name: getattr(self, name).model_dump(mode="json") for name in self.FILTER_ORDER},
            "apply": {
                key: {name: plan.configs[name].model_dump(mode="json") for name in plan.filters}
                for (key, profile), plan in sorted(self._plans.items(), key=lambda kv: kv[0][0]) if profile is None
            },
            "profiles": {
                profile: {
                    key: {name: plan.configs[name].model_dump(mode="json") for name in plan.filters}
                    for key in sorted(self.profiles.get(profile, {}))
                    for plan in (self._plans[(key, profile)],)
                }
                for profile in QUALITY_PROFILES
            },
        }
        self._policy_version = f"quality-{QUALITY_CODE_VERSION}-{canonical_digest(body)[:16]}"

    def model_copy(self, *, update: Optional[dict[str, Any]] = None, deep: bool = False) -> "QualityConfigBase":
        """A copy; with ``update`` the result is validated and compiled again (pydantic's
        ``model_copy`` would skip both and keep the old compiled filters)."""
        if update:
            return type(self).model_validate({**self.model_dump(), **update})
        return super().model_copy(deep=deep)

    def plan_for(self, schema_type: str, domain: str, profile: str = WEB) -> Plan:
        plan = self._by_type.get((schema_type, domain, profile))
        if plan is None:
            check_profile(profile)
            key = _resolve_key(self.apply, schema_type, domain)
            if key is None:
                raise ValueError(f"no quality filters declared for {schema_type}/{domain}")
            plan = self._plans[(key, profile)]
        return plan

    def text_plan(self, filters: Sequence[str], apply_key: Optional[str] = None, profile: Optional[str] = None) -> Plan:
        """The plan ``judge_text`` runs: the named text filters, with the overrides of
        ``apply_key`` if given and the profile's on top of them (compiled once per request
        shape, then cached)."""
        filters = tuple(filters)
        unknown = [f for f in filters if f not in self.TEXT_FILTERS]
        if unknown:
            raise ValueError(f"unknown text filter(s) {unknown}; text filters are {list(self.TEXT_FILTERS)}")
        if apply_key is not None and apply_key not in self.apply:
            raise ValueError(f"apply_key {apply_key!r} is not in the config's apply map")
        if profile is not None:
            check_profile(profile)
        cache_key = (frozenset(filters), apply_key, profile)
        plan = self._text_plans.get(cache_key)
        if plan is None:
            overrides = self._effective_overrides(apply_key, profile) if apply_key is not None else {}
            plan = self._plan("text", filters, overrides)
            self._text_plans[cache_key] = plan
        return plan


def _resolve_key(apply: dict, schema_type: str, domain: str) -> Optional[str]:
    for key in (f"{schema_type}/{domain}", f"{schema_type}/*", f"*/{domain}", "*/*"):
        if key in apply:
            return key
    return None


def _copy_nested(d: dict) -> dict:
    out: dict = {}
    for k, v in d.items():
        out[k] = _copy_nested(v) if isinstance(v, dict) else list(v) if isinstance(v, list) else v
    return out


def _default_maps(filters: Sequence[QualityFilter]) -> tuple[dict[str, list[str]], dict[str, dict[str, dict[str, Any]]]]:
    """The default ``apply`` and ``overrides`` maps from the filters' ``default_apply``; keys in
    ``DEFAULT_KEYS`` order (others after them, as first declared), filters in list order."""
    keys: list[str] = []
    for f in filters:
        keys.extend(k for k in f.default_apply if k not in keys)
    keys.sort(key=lambda k: DEFAULT_KEYS.index(k) if k in DEFAULT_KEYS else len(DEFAULT_KEYS))
    apply = {key: [f.name for f in filters if key in f.default_apply] for key in keys}
    overrides: dict[str, dict[str, dict[str, Any]]] = {}
    for key in keys:
        per_filter = {f.name: _copy_nested(dict(f.default_apply[key])) for f in filters if f.default_apply.get(key)}
        if per_filter:
            overrides[key] = per_filter
    return apply, overrides


def _default_profiles(filters: Sequence[QualityFilter]) -> dict[str, dict[str, dict[str, dict[str, Any]]]]:
    """The default ``profiles`` map from the filters' ``default_profiles``: every profile (``web``
    empty), apply keys in ``DEFAULT_KEYS`` order, filters in list order."""
    out: dict[str, dict[str, dict[str, dict[str, Any]]]] = {}
    for profile in QUALITY_PROFILES:
        keys: dict[str, dict[str, dict[str, Any]]] = {}
        for key in DEFAULT_KEYS:
            per_filter = {f.name: _copy_nested(dict(f.default_profiles[profile][key]))
                          for f in filters if key in f.default_profiles.get(profile, {})}
            if per_filter:
                keys[key] = per_filter
        out[profile] = keys
    return out


_MODEL_DOC = """The whole quality policy. ``apply`` maps ``<schema_type>/<domain>`` (either may be ``*``)
    to the filters that run; ``overrides`` replaces thresholds of a filter for one apply key;
    ``profiles`` puts thresholds on top of those for the records of a source's quality profile."""


def quality_config_model(filters: Sequence[QualityFilter], *, name: str = "QualityConfig") -> type[QualityConfigBase]:
    """The config model for ``filters`` (in the order they run): a section per filter, ``apply``
    and ``overrides`` that accept exactly these filter names, and the defaults they declare."""
    filters = tuple(filters)
    names = tuple(f.name for f in filters)
    if not names or len(set(names)) != len(names):
        raise ValueError(f"filter names must be distinct and at least one: {list(names)}")
    taken = set(QualityConfigBase.model_fields) | {"apply", "overrides", "profiles"}
    if taken & set(names):
        raise ValueError(f"filter name(s) {sorted(taken & set(names))} clash with config fields")
    filter_name = Literal[names]  # type: ignore[valid-type]
    default_apply, default_overrides = _default_maps(filters)
    default_profiles = _default_profiles(filters)
    model = create_model(  # type: ignore[call-overload]
        name,
        __base__=QualityConfigBase,
        __module__=__name__,
        __doc__=_MODEL_DOC,
        **{f.name: (f.config, f.config()) for f in filters},
        apply=(dict[str, list[filter_name]], Field(default_factory=lambda: _copy_nested(default_apply))),
        overrides=(
            dict[str, dict[filter_name, dict[str, Any]]],
            Field(default_factory=lambda: _copy_nested(default_overrides)),
        ),
        profiles=(
            dict[QualityProfile, dict[str, dict[filter_name, dict[str, Any]]]],
            Field(default_factory=lambda: _copy_nested(default_profiles)),
        ),
    )
    model.FILTERS = filters
    model.FILTER_ORDER = names
    model.TEXT_FILTERS = tuple(f.name for f in filters if f.is_text_filter)
    model.REASON_CODES = frozenset(code for f in filters for code in f.reasons)
    model.DEFAULT_PROFILES = default_profiles
    return model


def filter_version(name: str, cfg: BaseModel, config: QualityConfigBase) -> str:
    """``<filter>-<code version>-<digest of its effective thresholds>`` (text filters also digest the
    tokenizer settings of ``config``)."""
    body: dict[str, Any] = {"code": QUALITY_CODE_VERSION, "filter": name, "config": cfg.model_dump(mode="json")}
    if name in config.TEXT_FILTERS:
        body["unspaced_script_share"] = config.unspaced_script_share
        body["unspaced_ngram_scale"] = config.unspaced_ngram_scale
    return f"{name}-{QUALITY_CODE_VERSION}-{canonical_digest(body)[:12]}"


def quality_policy_version(config: QualityConfigBase) -> str:
    """Digest over the code version, every threshold of every filter, the apply map and overrides."""
    return config._policy_version


QualityConfig = quality_config_model(FILTERS)
FILTER_ORDER: tuple[str, ...] = QualityConfig.FILTER_ORDER
TEXT_FILTERS: tuple[str, ...] = QualityConfig.TEXT_FILTERS
REASON_CODES: frozenset[str] = QualityConfig.REASON_CODES
DEFAULT_APPLY, DEFAULT_OVERRIDES = _default_maps(FILTERS)
DEFAULT_PROFILES = _default_profiles(FILTERS)
