"""Signals a corpus builder filters text by: language, length, boilerplate ratio.

The language comes from py3langid (an offline n-gram identifier for 97 languages,
whose model ships in the package; BSD-3-Clause), on the first
:data:`LANGUAGE_SAMPLE` characters of the main text, with normalised probabilities.
A text with fewer than :data:`MIN_LANGUAGE_LETTERS` letters, or whose best language
scores below :data:`MIN_LANGUAGE_CONFIDENCE`, has no language (None). Codes are ISO
639-1 where the language has one (``en``, ``de``; the identifier's own labels
otherwise). Identification runs py3langid's model without its per-byte Python loop
(:mod:`parser.langid`: the same labels and probabilities, checked side by side in
tests/unit/test_langid.py). On the article-extraction benchmark's main texts it costs
about 0.3 ms of CPU per page (py3langid 0.4 itself: about 0.7-0.85 ms; on 2,000
characters; lingua-language-detector 2.1 in its low-accuracy mode, about 13 ms on 5,000;
py3langid and lingua agreed on 180 of 181 pages). The model loads once per process, on
first use, in about 0.05 s from a cache folder (``$XDG_CACHE_HOME/polite-crawler/langid``,
else ``~/.cache/...``) and holds about 6 MB of its own; its 30 MB of tables (the
probabilities float16, as in py3langid's model file) are mapped from the cache files
and shared by every process of the machine (all of it resident once texts in many
languages have been seen). The first process on a machine derives the cache
from py3langid's model: about 1.2 s of CPU and 220 MB at the peak, once (where the
folder cannot be written, at every start).
"""

from __future__ import annotations

import threading

from parser.langid import Identifier, load_identifier
from parser.results import TextSignals
from parser.text import MainText

__all__ = [
    "LANGUAGE_SAMPLE",
    "MIN_LANGUAGE_CONFIDENCE",
    "MIN_LANGUAGE_LETTERS",
    "TextSignals",
    "identify_language",
    "text_signals",
]

#: Characters of the text the language is identified from.
LANGUAGE_SAMPLE = 2000
#: Fewest letters a text needs for a language.
MIN_LANGUAGE_LETTERS = 20
#: Lowest probability of the best language for it to count.
MIN_LANGUAGE_CONFIDENCE = 0.5


_identifier: Identifier | None = None
_lock = threading.Lock()


def _model() -> Identifier:
    global _identifier
    with _lock:
        if _identifier is None:
            _identifier = load_identifier()
        return _identifier


def warm_up() -> None:
    """Load the language model now, not in the first page's parse (a few
    milliseconds; about a second on a machine's first start, see the module)."""
    _model()


def _enough_letters(sample: str) -> bool:
    letters = 0
    for char in sample:
        if char.isalpha():
            letters += 1
            if letters >= MIN_LANGUAGE_LETTERS:
                return True
    return False


def identify_language(text: str) -> tuple[str | None, float]:
    """(language, probability) of ``text``; (None, probability) when it has too few
    letters or no language is likely enough (see the module)."""
    sample = text[:LANGUAGE_SAMPLE]
    if not _enough_letters(sample):
        return None, 0.0
    language, confidence = _model().classify(sample)
    confidence = float(confidence)
    if confidence < MIN_LANGUAGE_CONFIDENCE:
        return None, confidence
    return str(language), confidence


def text_signals(main: MainText) -> TextSignals:
    """The signals of a page's main text."""
    language, confidence = identify_language(main.text)
    return TextSignals(language=language, language_confidence=round(confidence, 4),
                       chars=main.chars, words=main.words,
                       boilerplate_ratio=round(main.boilerplate_ratio, 4))
