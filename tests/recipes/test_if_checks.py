"""Every instruction checker on passing and failing texts, through the kinds' `check` (what the grader calls)."""

from __future__ import annotations

import pytest

from recipes.instruction_following import checks
from recipes.instruction_following.instructions import KINDS, kind_of

# (kind, params, text, followed)
CASES = [
    ("change_case:english_lowercase", {}, "all small letters here.", True),
    ("change_case:english_lowercase", {}, "One capital here.", False),
    ("change_case:english_lowercase", {}, "123 ...", False),
    ("change_case:english_capital", {}, "ALL CAPS, 100%.", True),
    ("change_case:english_capital", {}, "ALL CAPS but one word.", False),
    ("length_constraints:number_words", {"relation": "at least", "num_words": 3}, "one two three", True),
    ("length_constraints:number_words", {"relation": "at least", "num_words": 3}, "one two", False),
    ("length_constraints:number_words", {"relation": "less than", "num_words": 3}, "don't well-known", True),
    ("length_constraints:number_words", {"relation": "less than", "num_words": 3}, "a b c", False),
    ("length_constraints:number_sentences", {"relation": "at least", "num_sentences": 2}, "Hi. Bye!", True),
    ("length_constraints:number_sentences", {"relation": "at least", "num_sentences": 2}, "Hi... ", False),
    ("length_constraints:number_sentences", {"relation": "less than", "num_sentences": 2}, "Just one?!", True),
    ("length_constraints:number_sentences", {"relation": "less than", "num_sentences": 2}, "A. B. C.", False),
    ("length_constraints:number_paragraphs", {"num_paragraphs": 2}, "first\n***\nsecond", True),
    ("length_constraints:number_paragraphs", {"num_paragraphs": 2}, "first\n\nsecond", False),
    ("length_constraints:number_paragraphs", {"num_paragraphs": 2}, "first\n***\n\n***\nsecond", False),
    ("length_constraints:number_paragraphs", {"num_paragraphs": 3}, "a\n***\nb", False),
    ("keywords:existence", {"keywords": ["tea", "china"]}, "Tea came from China.", True),
    ("keywords:existence", {"keywords": ["tea", "china"]}, "Tea came from far away.", False),
    ("keywords:existence", {"keywords": ["tea"]}, "Teapots only.", False),
    ("keywords:forbidden_words", {"forbidden_words": ["very", "good"]}, "An excellent day.", True),
    ("keywords:forbidden_words", {"forbidden_words": ["very", "good"]}, "A Very long day.", False),
    ("keywords:frequency", {"keyword": "rain", "relation": "at least", "frequency": 2}, "Rain, rain, go.", True),
    ("keywords:frequency", {"keyword": "rain", "relation": "at least", "frequency": 2}, "Rain and rainbows.", False),
    ("keywords:frequency", {"keyword": "rain", "relation": "less than", "frequency": 2}, "Rain once.", True),
    ("keywords:frequency", {"keyword": "rain", "relation": "less than", "frequency": 2}, "rain rain", False),
    ("detectable_format:json_format", {}, '{"a": [1, 2]}', True),
    ("detectable_format:json_format", {}, '```json\n{"a": 1}\n```', True),
    ("detectable_format:json_format", {}, 'Here it is: {"a": 1}', False),
    ("detectable_format:json_format", {}, "{'a': 1}", False),
    ("detectable_format:number_bullet_lists", {"num_bullets": 2}, "Intro\n* one\n* two", True),
    ("detectable_format:number_bullet_lists", {"num_bullets": 2}, "- one\n  - two", True),
    ("detectable_format:number_bullet_lists", {"num_bullets": 2}, "* one\n* two\n* three", False),
    ("detectable_format:number_bullet_lists", {"num_bullets": 2}, "*bold* one\n*bold* two", False),
    ("detectable_format:multiple_sections", {"section_splitter": "Section", "num_sections": 2},
     "Section 1\nfoo\nSECTION 2\nbar", True),
    ("detectable_format:multiple_sections", {"section_splitter": "Section", "num_sections": 2},
     "Section 1\nfoo\nSection two\nbar", False),
    ("detectable_format:title", {}, "<<a title>>\nbody", True),
    ("detectable_format:title", {}, "<a title>\nbody", False),
    ("detectable_format:title", {}, "<<>> body", False),
    ("startend:start_phrase", {"phrase": "In short"}, "  in short, yes.", True),
    ("startend:start_phrase", {"phrase": "In short"}, "Yes. In short, yes.", False),
    ("startend:end_checker", {"end_phrase": "Hope this helps."}, "Answer.\nHope this helps.  ", True),
    ("startend:end_checker", {"end_phrase": "Hope this helps."}, "Hope this helps. Bye.", False),
    ("startend:quotation", {}, '"quoted whole"', True),
    ("startend:quotation", {}, '"quoted" not whole', False),
    ("startend:quotation", {}, '"', False),
    ("punctuation:no_comma", {}, "No commas here.", True),
    ("punctuation:no_comma", {}, "One, comma.", False),
    ("detectable_content:number_placeholders", {"num_placeholders": 2}, "Dear [name] at [address].", True),
    ("detectable_content:number_placeholders", {"num_placeholders": 2}, "Dear [name] at home.", False),
    ("detectable_content:postscript", {"postscript_marker": "P.S."}, "Body.\n\np.s. see you", True),
    ("detectable_content:postscript", {"postscript_marker": "P.S."}, "Body. PS see you", False),
    ("detectable_content:postscript", {"postscript_marker": "P.P.S"}, "Body.\nP.P.S more", True),
    ("detectable_content:postscript", {"postscript_marker": "P.P.S"}, "Body.\nP.S. more", False),
]


@pytest.mark.parametrize(("kind", "params", "text", "followed"), CASES)
def test_checker(kind, params, text, followed):
    assert kind_of(kind).check(text, params) is followed


def test_every_kind_has_a_passing_and_a_failing_case():
    outcomes = {(kind, followed) for kind, _, _, followed in CASES}
    for kind in KINDS:
        assert (kind.name, True) in outcomes and (kind.name, False) in outcomes, kind.name


@pytest.mark.parametrize(("text", "words", "sentences"), [
    ("", 0, 0),
    ("Hello world.", 2, 1),
    ("It's a well-known fact! Is it? Yes...", 7, 3),
    ("3.14 is pi", 4, 2),  # the decimal point splits a sentence: documented, predictable
])
def test_counting_rules(text, words, sentences):
    assert checks.count_words(text) == words
    assert checks.count_sentences(text) == sentences


def test_unknown_relation_names_the_value():
    with pytest.raises(ValueError, match="'about'"):
        checks.compare(3, "about", 3)


def test_unknown_kind_names_the_value():
    with pytest.raises(KeyError, match="no_such_kind"):
        kind_of("no_such_kind")
