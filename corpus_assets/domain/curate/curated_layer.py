"""Build the curated layer of one snapshot: template removal, quality filters, decontamination, PII redaction.

Before the records are curated, two streaming passes over the snapshot's canonical records find
each source's template (``templates.TemplateCounter``). Per canonical record the stages then run
in this order, and the first that rejects or quarantines decides: template removal (modify),
quality, then decontamination (reject or mask), then PII (redact or quarantine).
Decontamination *detection* runs for every record, also one quality rejected first, so the
``contamination`` table and the report count every match (``decided_by`` tells which stage's
decision stands); its decision is applied only to records still accepted. Tables:
``records`` (digests recomputed when modified), ``decisions`` (one row per canonical record),
``pii_audit`` and ``contamination`` (never the values), ``quarantine`` (owner-only).

Stages and tables: docs/curation.md#curated-layer
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping, Optional


from corpus_assets.domain.curate.config import CurationConfig
from corpus_assets.domain.curate.decontam import (
    ContaminationIndex,
    ContaminationReport,
    Decontaminator,
    decontam_policy_version,
)
from corpus_assets.domain.curate.decontam.eval_registry import EvalRegistry
from corpus_assets.domain.core.hashing import canonical_digest, dedup_key, sha256_text
from corpus_assets.domain.storage.layer_store import LayerStore, LayerVersion
from corpus_assets.domain.curate.pii import (
    PII_DETECTOR_VERSION, find_pii, pii_policy_version, quarantine_hits, redact_fields,
)
from corpus_assets.domain.curate.pii_crosscheck import second_opinion
from corpus_assets.domain.curate.quality import judge_record, quality_policy_version
from corpus_assets.domain.curate.quality.base import WEB, check_profile
from corpus_assets.domain.curate.templates import (
    SourceTemplates,
    TemplateConfig,
    TemplateCounter,
    TemplateIndex,
    templates_policy_version,
)
from corpus_assets.domain.canonical.records import (
    PAYLOAD_ADAPTER,
    Record,
    payload_text_view,
    record_digest,
    record_to_row,
    row_to_record,
)
from corpus_assets.domain.layers.decisions import decision as record_decision
from corpus_assets.domain.layers.registry import CURATED_RECORDS, layer

CURATED_CODE_VERSION = "curate-2"  # the layer's tables; 2: decisions in the shared decision record
# what decides content (enters the policy version): changes only when a decision would change
CURATION_LOGIC_VERSION = "curate-2"  # 2: template removal before the quality filters

# Payload keys that are structure, not text: never redacted or masked.
_STRUCTURAL_KEYS = frozenset({"kind", "role", "id", "tool_call_id", "name", "content_type", "verdict", "url"})

_PATH_PART_RE = re.compile(r"[^.\[\]]+|\[\d+\]")

CURATED_TABLES = layer(CURATED_RECORDS).table_specs()


def non_web_profiles(profiles: Optional[Mapping[str, str]]) -> dict[str, str]:
    """The sources whose quality profile is not ``web`` (the default), validated and sorted."""
    return {sid: p for sid, p in sorted((profiles or {}).items()) if check_profile(p) != WEB}


def _joined(*details: str) -> str:
    """A decision detail from the stages' details, in order, the empty ones left out."""
    return "; ".join(d for d in details if d)


def curation_policy_version(config: CurationConfig, registry_digest: str,
                            profiles: Optional[Mapping[str, str]] = None) -> str:
    """Digest of everything that decides: the curation config, the registry and the sources'
    quality profiles (sources.yaml ``profile``; only the non-web ones, so adding a web source
    changes nothing)."""
    spec = {
        "code_version": CURATION_LOGIC_VERSION,
        "templates": templates_policy_version(config.templates),
        "quality": quality_policy_version(config.quality),
        "decontam": decontam_policy_version(config.decontam, registry_digest),
        "pii": pii_policy_version(config.pii),
    }
    non_web = non_web_profiles(profiles)
    if non_web:
        spec["profiles"] = non_web
    return f"{CURATION_LOGIC_VERSION}+{canonical_digest(spec)[:16]}"


def _text_fields(node, path: str, out: dict[str, str]) -> None:
    """Collect every text leaf of a payload as {field path: text}, skipping structural keys."""
    if isinstance(node, dict):
        for k in sorted(node):
            if k not in _STRUCTURAL_KEYS:
                _text_fields(node[k], f"{path}.{k}" if path else k, out)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            _text_fields(v, f"{path}[{i}]", out)
    elif isinstance(node, str) and node:
        out[path] = node


def _set_path(node, path: str, value: str):
    """Write ``value`` at a path produced by ``_text_fields``."""
    parts = _PATH_PART_RE.findall(path)
    cur = node
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        key = int(part[1:-1]) if part.startswith("[") else part
        if last:
            cur[key] = value
        else:
            cur = cur[key]


def _with_payload(record: Record, payload_dict: dict) -> Record:
    """A copy of ``record`` with a new payload and recomputed digests (lang is kept)."""
    payload = PAYLOAD_ADAPTER.validate_python(payload_dict)
    new = record.model_copy(update={"payload": payload})
    text = payload_text_view(payload)
    new.text_sha256 = sha256_text(text)
    new.dedup_key = dedup_key(text, record.domain)
    new.record_sha256 = record_digest(new)
    return new


@dataclass
class CurationSummary:
    version: LayerVersion
    policy_version: str
    records_in: int
    outcomes: dict[str, int] = field(default_factory=dict)
    by_reason: dict[tuple[str, str, str], int] = field(default_factory=dict)  # (stage, outcome, reason) -> records
    # (source, lang, stage, reason) -> [records in, records out, chars in, chars out]
    retention: dict[tuple[str, str, str, str], list[int]] = field(default_factory=dict)
    pii_counts: dict[str, int] = field(default_factory=dict)
    contamination: dict[str, int] = field(default_factory=dict)  # benchmark -> flagged records (every stage)
    modified: int = 0
    # what was checked and found, with the protected texts that could not be checked (None: disabled)
    decontam: Optional[ContaminationReport] = None
    templates: dict[str, SourceTemplates] = field(default_factory=dict)  # source -> what template removal found
    # profile -> [records in, accepted, chars in, chars out]
    by_profile: dict[str, list[int]] = field(default_factory=dict)
    profiles: dict[str, str] = field(default_factory=dict)  # the sources with a non-web quality profile


_TEMPLATE_COLUMNS = ["source_id", "schema_type", "domain", "lang", "payload_json"]


def _template_pages(version: LayerVersion, config: TemplateConfig, batch_size: int):
    """``(source_id, text, title, lang)`` of the document records template removal reads."""
    for batch in version.iter_batches("records", batch_size=batch_size, columns=_TEMPLATE_COLUMNS):
        cols = batch.to_pydict()
        for sid, stype, domain, lang, payload_json in zip(*(cols[c] for c in _TEMPLATE_COLUMNS)):
            if stype == "document" and domain in config.domains:
                payload = json.loads(payload_json)
                yield sid, payload.get("text") or "", payload.get("title"), lang


def find_templates(version: LayerVersion, config: TemplateConfig, batch_size: int = 256) -> TemplateIndex:
    """The two counting passes of template removal over a canonical version (one streaming read
    each; memory bounded by the counters, not by the snapshot)."""
    counter = TemplateCounter(config)
    for sid, text, _title, lang in _template_pages(version, config, batch_size):
        counter.add(sid, text, lang)
    for sid, text, title, lang in _template_pages(version, config, batch_size):
        counter.isolation(sid, text, title, lang)
    return counter.index()


def build_curated(
    store: LayerStore,
    snapshot: str,
    config: CurationConfig,
    registry: EvalRegistry,
    *,
    canonical_version: LayerVersion,
    index: Optional[ContaminationIndex] = None,
    batch_size: int = 256,
    log: Optional[Callable[[str], None]] = None,
    profiles: Optional[Mapping[str, str]] = None,
) -> CurationSummary:
    """``profiles``: source id -> quality profile (sources.yaml ``profile``); a source not named is
    judged with the ``web`` thresholds."""
    profiles = non_web_profiles(profiles)
    policy = curation_policy_version(config, registry.digest, profiles)
    index = index if index is not None else (
        ContaminationIndex.build(registry, config.decontam) if config.decontam.enabled else None
    )
    if index is not None and index.policy_version != decontam_policy_version(config.decontam, registry.digest):
        # the decisions follow the index's own policy: it must be the one the version records
        raise ValueError("the ContaminationIndex was built for another decontamination policy or registry")
    build_spec = {
        "code_version": CURATED_CODE_VERSION,
        "policy_version": policy,
        "curation": config.model_dump(mode="json"),
        "eval_registry_digest": registry.digest,
        "canonical_version": canonical_version.content_digest,
        "profiles": profiles,
    }
    summary = CurationSummary(version=None, policy_version=policy, records_in=0, profiles=profiles)  # type: ignore[arg-type]
    if index is not None:
        summary.decontam = Decontaminator(index).report
    started = last_log = time.monotonic()
    templates = find_templates(canonical_version, config.templates, batch_size) if config.templates.enabled else None
    if templates is not None:
        summary.templates = templates.stats
        if log:
            found = {sid: st.template_keys for sid, st in templates.stats.items() if st.template_keys}
            log(f"curate {snapshot}: templates found in {time.monotonic() - started:.1f}s, template keys per source {found}")
    with store.new_version(CURATED_RECORDS, snapshot, CURATED_TABLES, build_spec) as w:
        buf: dict[str, list] = {name: [] for name in CURATED_TABLES}

        def flush() -> None:
            for name, rows in buf.items():
                if rows:
                    w.write(name, rows)
                    rows.clear()

        for batch in canonical_version.iter_batches("records", batch_size=batch_size):
            for row in batch.to_pylist():
                _curate_one(row, config, index, policy, buf, summary, templates, profiles.get(row["source_id"], WEB))
                summary.records_in += 1
            flush()
            now = time.monotonic()
            if log and now - last_log >= 10:
                rate = summary.records_in / (now - started)
                log(f"curate {snapshot}: {summary.records_in} records ({rate:.1f}/s), outcomes {summary.outcomes}")
                last_log = now
        flush()
        summary.version = w.commit(
            extra_manifest={
                "records_in": summary.records_in,
                "outcomes": dict(sorted(summary.outcomes.items())),
                "policy_version": policy,
                "eval_registry_digest": registry.digest,
                # registry-level facts only (a purge rewrites the tables, not these): per benchmark,
                # the protected texts checked and those that could not be (release data card, SQL)
                **({"decontam": decontam_manifest(summary.decontam)} if summary.decontam is not None else {}),
                "templates": {sid: st.as_dict() for sid, st in sorted(summary.templates.items())},
                "profiles": profiles,
                "by_profile": {p: dict(zip(("records_in", "accepted", "chars_in", "chars_out"), v))
                               for p, v in sorted(summary.by_profile.items())},
            }
        )
    if log:
        log(f"curate {snapshot}: {summary.records_in} records in {time.monotonic() - started:.1f}s: {summary.outcomes}")
    return summary


def _curate_one(row: dict, config: CurationConfig, index, policy: str, buf: dict, s: CurationSummary,
                templates: Optional[TemplateIndex] = None, profile: str = WEB) -> None:
    record = row_to_record(row)
    chars_in = int(row["char_count"])
    stage, outcome, action, reason, detail = "curate", "accepted", "accept", "ok", ""
    pii_counts: dict[str, int] = {}
    current = record

    if templates is not None and templates.applies(record.schema_type, record.domain):
        p = record.payload
        stripped = templates.strip(record.source_id, p.text, p.title, record.lang)
        detail = stripped.detail()  # also when the record was all template (left as it is)
        if stripped.lines_removed:
            current = _with_payload(record, {**p.model_dump(mode="json"), "text": stripped.text})
            stage, action, reason = "templates", "modify", "templates.removed"

    verdict = judge_record(current, config.quality, profile)
    if not verdict.passed:
        # the template share stays in the detail: it says what the filters judged
        stage, outcome, action, reason = "quality", "rejected", "reject", verdict.reason
        detail = _joined(verdict.detail, detail)

    if index is not None:
        # detection for every record (the report counts matches in quality-rejected records too);
        # the decision is applied only if no earlier stage rejected the record
        decided_by = "decontam" if outcome == "accepted" else stage
        fields: dict[str, str] = {}
        _text_fields(current.payload.model_dump(mode="json"), "", fields)
        # the decision is the Decontaminator's (a view over the index: free to construct)
        decision = Decontaminator(index).decide(fields)
        buf["contamination"].extend(decision.contamination_rows(record.record_id, record.source_id, decided_by))
        for b in sorted({m.benchmark for m in decision.matches}):
            s.contamination[b] = s.contamination.get(b, 0) + 1
        if s.decontam is not None:
            s.decontam.add(decision, fields, source=record.source_id, record_id=record.record_id, decided_by=decided_by)
        if decided_by != "decontam":
            pass  # reported only: the earlier stage's rejection stands
        elif decision.action == "remove":
            stage, outcome, action, reason = "decontam", "rejected", "reject", decision.reason
            detail = _joined(decision.detail, detail)
        elif decision.action == "mask":
            payload = current.payload.model_dump(mode="json")
            for path, text in decision.masked.items():
                _set_path(payload, path, text)
            current = _with_payload(current, payload)
            reason = f"{reason}+{decision.reason}" if action == "modify" else decision.reason
            stage, action = "decontam", "modify"

    if outcome == "accepted" and config.pii.enabled:
        fields = {}
        _text_fields(current.payload.model_dump(mode="json"), "", fields)
        new_fields, found = redact_fields(fields, config.pii)
        for path, span in found:
            pii_counts[span.type] = pii_counts.get(span.type, 0) + 1
        # quarantine_types, and secret kinds such as private keys (quarantine_secret_kinds)
        quarantine_types = quarantine_hits(found, config.pii)
        if quarantine_types:
            stage, outcome, action, reason = "pii", "quarantined", "quarantine", "pii.quarantined_type"
            detail = _joined("contains " + ", ".join(quarantine_types), detail)
            buf["quarantine"].append(
                {
                    "record_id": record.record_id,
                    "reason": reason,
                    "detail": detail,
                    "record_json": json.dumps(row, ensure_ascii=False, sort_keys=True, default=str),
                }
            )
        elif found:
            for path, span in found:
                buf["pii_audit"].append(
                    {
                        "record_id": record.record_id,
                        "field": path,
                        "pii_type": span.type,
                        "start": span.start,
                        "end": span.end,
                        "detector_version": PII_DETECTOR_VERSION,
                    }
                )
            payload = current.payload.model_dump(mode="json")
            for path, text in new_fields.items():
                if text != fields[path]:
                    _set_path(payload, path, text)
            current = _with_payload(current, payload)
            redacted = "redacted " + ", ".join(f"{t} {n}" for t, n in sorted(pii_counts.items()))
            if action == "accept":
                stage, action, reason = "pii", "modify", "pii.redacted"
            else:
                reason = reason + "+pii.redacted"
            detail = _joined(detail, redacted)
        for t, c in pii_counts.items():
            s.pii_counts[t] = s.pii_counts.get(t, 0) + c

    if profile != WEB:  # which thresholds judged it (the policy version says it too)
        detail = _joined(detail, f"profile: {profile}")
    chars_out = 0
    if outcome == "accepted":
        out_row = record_to_row(current)
        chars_out = out_row["char_count"]
        buf["records"].append(out_row)
        if action == "modify":
            s.modified += 1
    # the decision record (layers/decisions.py); PII counts per type are in the detail (spans: pii_audit)
    buf["decisions"].append(record_decision(
        stage=stage, action=action, reason=reason, detail=detail, policy_version=policy,
        record_id=record.record_id, item_id=row.get("item_id"), source_id=record.source_id, snapshot=record.snapshot,
        schema_type=record.schema_type, domain=record.domain, lang=record.lang, chars_in=chars_in, chars_out=chars_out,
    ))
    s.outcomes[outcome] = s.outcomes.get(outcome, 0) + 1
    s.by_reason[(stage, outcome, reason)] = s.by_reason.get((stage, outcome, reason), 0) + 1
    key = (record.source_id, record.lang, stage, reason)
    for r in (s.retention.setdefault(key, [0, 0, 0, 0]), s.by_profile.setdefault(profile, [0, 0, 0, 0])):
        r[0] += 1
        r[1] += 1 if outcome == "accepted" else 0
        r[2] += chars_in
        r[3] += chars_out


def decontam_manifest(report: ContaminationReport) -> dict:
    """The curated manifest's ``decontam`` entry: the policy, the per-benchmark coverage (protected
    texts checked, too short, all n-grams suppressed, under the long n-gram rule) and the limits."""
    d = report.to_dict()
    return {
        "policy_version": d["policy_version"],
        "method": {k: d["method"][k] for k in (
            "n", "short_n", "short_item_tokens", "tau", "long_item_tokens", "long_item_min_ngrams",
            "max_ngram_item_frequency", "template_share", "template_min_items", "action", "fields")},
        "coverage": d["coverage"],
        "template_ngrams": d["method"]["template_ngrams"],
        "limits": d["limits"],
    }


def check_no_pii_in_public(version: LayerVersion, config: CurationConfig) -> list[str]:
    """Re-detect PII in every public text of the curated records: redacted types must be gone.

    Two detectors look: the primary one (``pii.find_pii``, which redacted the records) and an
    independent second one (``pii_crosscheck.second_opinion``: other code, libphonenumber and
    detect-secrets, the same policy), so the check can fail when the primary misses something.
    Returns problems as ``record_id: type`` or ``record_id: type (second detector)`` (never the value)."""
    problems: list[str] = []
    if not config.pii.enabled:
        return problems
    for batch in version.iter_batches("records", columns=["record_id", "payload_json"]):
        for rid, payload_json in zip(batch.column("record_id").to_pylist(), batch.column("payload_json").to_pylist()):
            fields: dict[str, str] = {}
            _text_fields(json.loads(payload_json), "", fields)
            for text in fields.values():
                for span in find_pii(text, config.pii):
                    problems.append(f"{rid}: {span.type}")
                for finding in second_opinion(text, config.pii):
                    problems.append(f"{rid}: {finding.type} (second detector)")
    return problems
