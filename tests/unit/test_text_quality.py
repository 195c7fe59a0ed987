"""Main-text quality on the article-extraction benchmark (tests/conformance): a
regression in ``parser.text`` fails here. Figures and how they were made:
docs/text-quality.md (``python -m bench.text_quality``)."""

from __future__ import annotations

import pytest

from bench import text_quality
from parser.text import main_text
from tests.conftest import conformance_path

#: Measured when the extractor was last changed (F1 0.968, precision 0.954, recall
#: 0.982), less a small margin.
MIN_F1 = 0.96
MIN_PRECISION = 0.945
MIN_RECALL = 0.975


@pytest.fixture(scope="module")
def pages() -> list[text_quality.Page]:
    return text_quality.load_pages(conformance_path("article-extraction"))


def test_benchmark_is_complete(pages: list[text_quality.Page]) -> None:
    assert len(pages) == 181
    assert all(page.truth and page.html for page in pages)


def test_main_text_scores_on_the_benchmark(pages: list[text_quality.Page]) -> None:
    predictions = {page.key: main_text(page.html) for page in pages}
    score = text_quality.score(pages, predictions, [],
                               text_quality.scorer(conformance_path("article-extraction")))
    assert score.f1 >= MIN_F1, score
    assert score.precision >= MIN_PRECISION, score
    assert score.recall >= MIN_RECALL, score


def test_markdown_scores_as_the_main_text_on_the_benchmark(
        pages: list[text_quality.Page]) -> None:
    """The Markdown, stripped back to plain text, keeps what the main text keeps: it
    scores at least as well (measured: F1 0.968, precision 0.954, recall 0.982)."""
    from parser.markdown import markdown_text, page_markdown

    evaluate = text_quality.scorer(conformance_path("article-extraction"))
    plain = text_quality.score(pages, {page.key: main_text(page.html) for page in pages},
                               [], evaluate)
    stripped = {page.key: markdown_text(page_markdown(page.html, page.url or "https://e.x/"))
                for page in pages}
    score = text_quality.score(pages, stripped, [], evaluate)
    assert score.f1 >= plain.f1 - 0.001, (score, plain)
    assert score.f1 >= MIN_F1, score
    assert score.precision >= MIN_PRECISION, score
    assert score.recall >= MIN_RECALL, score


def test_scorer_tells_a_bad_extractor(pages: list[text_quality.Page]) -> None:
    """The scoring path can fail: the whole visible text scores far lower."""
    from parser.html import parse_document
    from parser.text import _convert

    predictions = {page.key: _convert(parse_document(page.html).tree, main_content=False)
                   for page in pages[:40]}
    score = text_quality.score(pages[:40], predictions, [],
                               text_quality.scorer(conformance_path("article-extraction")))
    assert score.precision < 0.8


def test_paragraph_share_counts_words_in_order() -> None:
    words = "One two three four five six seven eight nine ten eleven"
    html = f"<body><p>{words}.</p><p>Too short to count.</p></body>"
    size = len(words)
    assert text_quality.paragraph_share(html, "One two, three four five six seven eight "
                                              "nine ten eleven") == (size, size)
    assert text_quality.paragraph_share(html, "eleven ten nine") == (0, size)
