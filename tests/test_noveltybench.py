"""NoveltyBench: the k-answers reader fuzzed over the numbering styles models write, and the partition and
Utility bookkeeping checked against properties that hold for every input."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reasoning_study.metrics.noveltybench import prompt_scores, utility
from reasoning_study.tasks.noveltybench import (
    class_openers,
    first_equivalent,
    lexical_equivalent,
    numbered_answers,
    partition,
)

STYLES = [
    "{n}. ",
    "{n}) ",
    "({n}) ",
    "**{n}.** ",
    "### {n}. ",
    "Answer {n}: ",
    "{n} - ",
    "- **{n}.** ",
    "★{n}. ",
    "➤ {n}) ",
    "✦ **{n}.** ",
]  # decorated numbering: the embedded model writes ★1.
WORD = st.text(alphabet=st.characters(whitelist_categories=("Ll", "Lu")), min_size=1, max_size=8)
ANSWER = st.lists(WORD, min_size=1, max_size=6).map(" ".join)  # one line, opening with a letter
PROSE = st.sampled_from(["", "Here are my answers:\n\n", "Sure! Some ideas.\n", "I thought about it.\n\n"])
OUTRO = st.sampled_from(["", "\n\nHope this helps.", "\nLet me know if you want more."])


@settings(max_examples=300, deadline=None)
@given(
    answers=st.lists(ANSWER, min_size=1, max_size=12),
    style=st.sampled_from(STYLES),
    intro=PROSE,
    outro=OUTRO,
    blank=st.booleans(),
    extra=st.integers(-2, 2),
)
def test_numbered_answers_read_back(answers, style, intro, outro, blank, extra):
    k = max(1, len(answers) + extra)
    reply = intro + ("\n\n" if blank else "\n").join(style.format(n=i + 1) + a for i, a in enumerate(answers)) + outro
    read, status = numbered_answers(reply, k)
    expected = answers[:k]
    if outro:
        expected = expected[:-1] + [expected[-1]] if len(answers) > k else expected  # the outro joins the last item
    assert status == ("complete" if len(answers) == k else "short" if len(answers) < k else "long")
    assert len(read) == min(k, len(answers))
    assert read[:-1] == expected[:-1]
    assert read[-1].startswith(expected[-1])


@pytest.mark.parametrize(
    "reply, k, expected",
    [
        ("★1. red\n★2. blue", 2, (["red", "blue"], "complete")),  # what the embedded model wrote
        ("☆ 1) red\n☆ 2) blue\n☆ 3) green", 2, (["red", "blue"], "long")),
        ("~1.5 million people\n1. red", 1, (["red"], "complete")),  # a decimal opening a line is no item
        ("At 2:30 we met.\nI gave it ★1. Fine.", 2, (["At 2:30 we met.\nI gave it ★1. Fine."], "unnumbered")),
        ("★ 3 stars, 2 cats and 1 dog.", 1, (["★ 3 stars, 2 cats and 1 dog."], "unnumbered")),  # prose with numbers
    ],
)
def test_numbered_answers_accept_decorated_numbers_not_prose(reply, k, expected):
    assert numbered_answers(reply, k) == expected


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["red", "Red!", "blue", "a blue", "green"]), min_size=0, max_size=10))
def test_partition_numbers_classes_as_they_open(generations):
    classes = partition(generations, first_equivalent(lexical_equivalent))
    firsts = [c for c, opens in zip(classes, class_openers(classes)) if opens]
    assert firsts == list(range(len(firsts)))  # 0, 1, 2, ... in order of opening
    for g, c in zip(generations, classes):  # every generation is equivalent to its class's first member
        assert lexical_equivalent(generations[classes.index(c)], g)


@settings(max_examples=300, deadline=None)
@given(
    classes=st.lists(st.integers(0, 4), min_size=1, max_size=10),
    scores=st.lists(st.integers(1, 10), min_size=10, max_size=10),
    extra=st.integers(0, 5),
    patience=st.floats(0.05, 1.0),
)
def test_utility_bounds(classes, scores, extra, patience):
    canonical = list(dict.fromkeys(classes))
    classes = [canonical.index(c) for c in classes]  # numbered as they open, as `partition` returns them
    scores = scores[: len(classes)]
    k = len(classes) + extra
    s = prompt_scores(classes, scores, k, patience)
    openers = [sc for sc, opens in zip(scores, class_openers(classes)) if opens]
    assert 0 < s["utility"] <= max(openers) + 1e-9
    assert s["distinct_pct"] == len(openers) / k
    if patience == 1.0:
        assert math.isclose(s["utility"], sum(openers) / k)
    weights = patience ** np.arange(k)
    assert math.isclose(
        utility(classes, scores, k, patience),
        sum(w * sc for w, sc, o in zip(weights, scores, class_openers(classes)) if o) / weights.sum(),
    )
