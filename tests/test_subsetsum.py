"""Acceptance tests of `tasks.subsetsum`: the public reference data is reproduced exactly, the
enumerator agrees with CP-SAT and with the counter, and the model-answer parser never raises and reads
back what we write, in any order and with noise around it."""

import json
import os
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reasoning_study.tasks.core import ParsedSolution, TooManySolutions, attempt_rng, level_of, valid_solutions
from reasoning_study.tasks.subsetsum import (
    _CHECKING,
    LEVELS,
    TASK,
    SubsetSumInstance,
    check_solution,
    count_solutions,
    cpsat_enumerate,
    enumerate_solutions,
    generate_instance,
    instance_key,
    parse_answer,
    parse_question,
    parse_solutions_text,
    render_solution,
    render_solutions,
)

ROOT = Path(__file__).resolve().parents[1]
REFERENCE_NAME = "musobench_subsetsum.jsonl"


def reference_path() -> Path | None:
    "The public reference file: $MUSOBENCH_SUBSETSUM_JSONL, else data/reference/ in the repo, else ../shared/reference/."
    candidates = [
        os.environ.get("MUSOBENCH_SUBSETSUM_JSONL"),
        ROOT / "data" / "reference" / REFERENCE_NAME,
        ROOT.parent / "shared" / "reference" / REFERENCE_NAME,
    ]
    return next((Path(c) for c in candidates if c and Path(c).is_file()), None)


@pytest.fixture(scope="module")
def reference_rows():
    path = reference_path()
    if path is None:
        pytest.skip(f"reference data {REFERENCE_NAME} not found (set MUSOBENCH_SUBSETSUM_JSONL)")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# ---------------------------------------------------------------- the reference data, reproduced


@pytest.mark.slow
def test_reference_data_reproduced_exactly(reference_rows):
    assert len(reference_rows) == 700
    for row in reference_rows:
        inst = parse_question(row["question"])
        assert inst.question() == row["question"], row["question_id"]
        solutions = enumerate_solutions(inst)
        text = row["answers"]["0"]
        assert solutions == parse_solutions_text(text, inst), row["question_id"]
        assert len(solutions) == row["answer_count"] == count_solutions(inst), row["question_id"]
        assert render_solutions(inst, solutions) == text, row["question_id"]


def test_reference_levels_are_our_levels(reference_rows):
    levels = Counter(level_of(row["answer_count"], LEVELS) for row in reference_rows)
    assert levels == {level: 100 for level in range(1, 8)}
    assert len({instance_key(parse_question(row["question"])) for row in reference_rows}) == 700


def test_reference_answers_parse_as_model_answers(reference_rows):
    "The ground-truth text itself, given to the model-answer parser, is read completely and all valid."
    for row in reference_rows[:50]:
        inst = parse_question(row["question"])
        parsed = parse_answer(row["answers"]["0"], inst)
        assert [p.status for p in parsed] == ["valid"] * row["answer_count"]
        assert [p.solution for p in parsed] == parse_solutions_text(row["answers"]["0"])


# ---------------------------------------------------------------- generation and enumeration

RANDOM = [generate_instance(attempt_rng(TASK, 7, attempt)) for attempt in range(300)]


def test_generation_follows_reference_parameters():
    for inst in RANDOM:
        assert 10 <= len(inst.values) <= 15
        assert len(set(inst.values)) == len(inst.values)
        assert all(1 <= v <= 50 for v in inst.values)
        assert max(inst.values) - min(inst.values) + 1 >= len(inst.values)
        assert count_solutions(inst) >= 1  # the target is the sum of a subset
    assert generate_instance(attempt_rng(TASK, 7, 3)) == RANDOM[3]
    assert len({instance_key(i) for i in RANDOM}) > 290
    assert {len(i.values) for i in RANDOM} == set(range(10, 16))


def test_enumeration_agrees_with_cpsat_checker_and_counter():
    for inst in RANDOM:
        solutions = enumerate_solutions(inst)
        assert solutions == cpsat_enumerate(inst)
        assert solutions == sorted(set(solutions))  # lexicographic, no duplicates
        assert count_solutions(inst) == len(solutions)
        for s in solutions:
            assert check_solution(inst, s) == []
            assert list(s) == sorted(s)


def test_hand_enumeration_and_counts():
    inst = SubsetSumInstance((5, 1, 4, 2, 3), 5)
    assert enumerate_solutions(inst) == [(1, 4), (2, 3), (5,)]
    assert count_solutions(inst) == 3
    assert enumerate_solutions(SubsetSumInstance((1, 2), 4)) == cpsat_enumerate(SubsetSumInstance((1, 2), 4)) == []
    assert enumerate_solutions(SubsetSumInstance((1, 2), 0)) == cpsat_enumerate(SubsetSumInstance((1, 2), 0)) == []
    everything = SubsetSumInstance(tuple(range(1, 16)), 120)  # only the whole set
    assert enumerate_solutions(everything) == [tuple(range(1, 16))] == cpsat_enumerate(everything)


def test_cap():
    inst = next(i for i in RANDOM if count_solutions(i) > 20)
    n = count_solutions(inst)
    for enumerate_ in (enumerate_solutions, cpsat_enumerate):
        with pytest.raises(TooManySolutions) as e:
            enumerate_(inst, cap=20)
        assert e.value.cap == 20
        assert len(enumerate_(inst, cap=n)) == n
        with pytest.raises(ValueError, match="cap"):
            enumerate_(inst, cap=-1)


# ---------------------------------------------------------------- texts


def test_question_round_trip_and_errors():
    for inst in RANDOM[:50]:
        assert parse_question(inst.question()) == inst
    for bad in [
        "",
        "Given the set of unique integers: {}\nFind all subsets that sum exactly to the target: 3",
        "Given the set of unique integers: {1, 2}\nFind all subsets that sum to: 3",
        "Given the set of unique integers: {1, 1}\nFind all subsets that sum exactly to the target: 2",
    ]:
        with pytest.raises(ValueError):
            parse_question(bad)
    with pytest.raises(ValueError, match="not a SubsetSum question"):
        parse_question(None)


def test_instance_validation():
    with pytest.raises(ValueError, match="distinct"):
        SubsetSumInstance((2, 2), 4)
    with pytest.raises(ValueError, match="positive"):
        SubsetSumInstance((-2, 2), 0)
    with pytest.raises(TypeError):
        SubsetSumInstance((True, 2), 3)
    import numpy as np

    inst = SubsetSumInstance(tuple(np.array([3, 1, 2])), np.int64(3))
    assert inst.values == (3, 1, 2) and type(inst.values[0]) is int and type(inst.target) is int


def test_solutions_text_round_trip_and_errors():
    inst = SubsetSumInstance((5, 1, 4, 2, 3), 5)
    assert render_solutions(inst, [(1, 4), (2, 3), (5,)]) == "[[1, 4], [2, 3], [5]]"
    assert render_solutions(inst, []) == "[]"
    assert parse_solutions_text("[[1, 4], [2, 3], [5]]", inst) == [(1, 4), (2, 3), (5,)]
    for bad in ["", "[[1, 2]", "{1: 2}", "[[1, 'a']]", "[[1, True]]", "[1, 2]", "__import__('os')"]:
        with pytest.raises(ValueError):
            parse_solutions_text(bad)
    with pytest.raises(ValueError, match="invalid entries"):
        parse_solutions_text("[[1, 2]]", inst)
    assert render_solution(inst, (1, 4), 7) == "Solution 7: {1, 4}"


# ---------------------------------------------------------------- the constraint checker


@pytest.mark.parametrize(
    "solution, problems",
    [
        ((16, 19), []),
        ((35,), []),
        ((4, 4, 27), ["uses 4 twice"]),
        ((4, 4, 4, 23), ["uses 4 3 times", "uses 23, which is not in the set"]),
        ((7, 28), ["uses 7, which is not in the set", "uses 28, which is not in the set"]),
        ((1, 16, 19), ["sums to 36, not 35"]),
        ((16,), ["sums to 16, not 35"]),
        ((-4, 39), ["uses -4, which is not in the set", "uses 39, which is not in the set"]),
        ((9, 9, 19), ["uses 9 twice", "sums to 37, not 35"]),
        ((), ["is empty"]),
    ],
)
def test_check_solution(solution, problems):
    inst = SubsetSumInstance((19, 4, 41, 40, 1, 16, 9, 35, 6, 27), 35)
    assert check_solution(inst, solution) == problems
    assert check_solution(inst, tuple(reversed(solution))) == problems  # order does not matter


def test_check_solution_rejects_non_integers():
    with pytest.raises(TypeError):
        check_solution(SubsetSumInstance((1, 2), 3), (1, "2"))


# ---------------------------------------------------------------- parsing model answers: hand cases

DEMO = SubsetSumInstance((19, 4, 41, 40, 1, 16, 9, 35, 6, 27), 35)  # reference question 146
DEMO_SOLUTIONS = [(1, 6, 9, 19), (4, 6, 9, 16), (16, 19), (35,)]


def statuses(text, inst=DEMO):
    return [(p.status, p.solution, p.reason) for p in parse_answer(text, inst)]


def test_answer_with_decorated_headings():
    text = r"""Let me think about the set {19, 4, 41, 40, 1, 16, 9, 35, 6, 27} and the target 35.

**Solution 1:** `{35}`
**Solution 2:** $\{16, 19\}$
*Solution 3:* \left\{ 1, 6, 9, 19 \right\}
### Solution 4
{4, 6, 9, 16} (sum = 35)

Total 4 feasible solutions shown above."""
    assert statuses(text) == [("valid", s, "") for s in [(35,), (16, 19), (1, 6, 9, 19), (4, 6, 9, 16)]]


def test_answer_with_sums_violations_and_truncation():
    text = """Solution 1: 16 + 19 = 35
Solution 2: 4 + 6 + 9 + 16 = 35 ✓
Solution 3: {4, 4, 27}
Solution 4: 6 + 9 + 19 = 35
Solution 5: {1, 6, 9, 19.0}
Solution 6: {3, 5,"""
    assert statuses(text) == [
        ("valid", (16, 19), ""),
        ("valid", (4, 6, 9, 16), ""),
        ("violation", (4, 4, 27), "uses 4 twice"),
        ("violation", (6, 9, 19), "sums to 34, not 35"),
        ("malformed", None, "non-integer element '19.0'"),
        ("malformed", None, "unfinished"),
    ]


def test_answer_with_reasoning_inside_a_block():
    "Inside a block the set literal wins over arithmetic written before it."
    text = "Solution 1: start with 16, then 16 + 9 = 25, add 6 and 4: {4, 6, 9, 16}\nSolution 2: 35"
    assert statuses(text) == [("valid", (4, 6, 9, 16), ""), ("valid", (35,), "")]


def test_answer_with_empty_and_prose_blocks():
    text = "Solution 1: {}\nSolution 2: none left\nSolution 3:"
    assert statuses(text) == [
        ("violation", (), "is empty"),
        ("malformed", None, "no subset after 'Solution 2'"),
    ]  # 3: bare


def test_prose_mentioning_a_solution_is_not_a_heading():
    text = "Solution 1: {16, 19}\nSolution 2: {35}\n\nSolution 1 is the smallest; solution 2 uses one number."
    assert statuses(text) == [("valid", (16, 19), ""), ("valid", (35,), "")]


def test_truncated_sum_and_bare_list():
    assert statuses("Solution 1: 16, 19\nSolution 2: 1 + 6 +") == [
        ("valid", (16, 19), ""),
        ("malformed", None, "unfinished"),
    ]
    assert statuses("Solution 1: 16, 19\nSolution 2: 1, 6,") == [
        ("valid", (16, 19), ""),
        ("malformed", None, "unfinished"),
    ]


def test_answer_without_headings():
    text = r"""Given the set {19, 4, 41, 40, 1, 16, 9, 35, 6, 27}, find all subsets that sum to 35.
The set is {19, 4, 41, 40, 1, 16, 9, 35, 6, 27}.
Trying 27 + 6 = 33, too small; 27 + 6 + 1 = 34.
1. {16, 19}
- [1, 6, 9, 19]
* $4 + 6 + 9 + 16 = 35$
- _{35}_ (sum = 35)
- {41, 6} is too big
- {1, 2, ..., 9}
[Note: all subsets were checked.] [[CONFIDENCE: \boxed{90}]]
Total 4 feasible subsets"""
    assert statuses(text) == [
        ("valid", (16, 19), ""),
        ("valid", (1, 6, 9, 19), ""),
        ("valid", (4, 6, 9, 16), ""),
        ("valid", (35,), ""),
        ("violation", (6, 41), "sums to 47, not 35"),
        ("malformed", None, "contains an ellipsis"),
    ]


def test_answer_with_several_sets_on_a_line_and_truncated_tail():
    assert statuses("The subsets are {16, 19}, {35} and [1, 6, 9,") == [
        ("valid", (16, 19), ""),
        ("valid", (35,), ""),
        ("malformed", None, "unfinished"),
    ]


def test_whole_set_is_a_solution_when_it_sums_to_the_target():
    "Reference question 128: the only solution is the whole set; it must not be taken for a restatement."
    inst = SubsetSumInstance((14, 46, 24, 6, 22, 48, 8, 31, 11, 13), 223)
    whole = tuple(sorted(inst.values))
    assert enumerate_solutions(inst) == [whole]
    assert statuses("Solution 1: {14, 46, 24, 6, 22, 48, 8, 31, 11, 13}", inst) == [("valid", whole, "")]
    assert statuses("The only subset: {6, 8, 11, 13, 14, 22, 24, 31, 46, 48}", inst) == [("valid", whole, "")]
    assert statuses("We use {19, 4, 41, 40, 1, 16, 9, 35, 6, 27}: no.\n{35}") == [("valid", (35,), "")]


def test_snippet_keeps_original_text():
    parsed = parse_answer("intro\n**Solution 1:** $\\{16, 19\\}$\n\nSolution 2:\n- 35", DEMO)
    assert [p.text for p in parsed] == ["**Solution 1:** $\\{16, 19\\}$", "Solution 2:\n- 35"]
    assert [p.status for p in parsed] == ["valid", "valid"]


def test_nothing_to_parse():
    for text in ["", "   ", None, 42, "I could not find any subset.", "Target: 35", "Total 0 feasible solutions."]:
        assert parse_answer(text, DEMO) == []


# ---------------------------------------------------------------- parsing model answers: fuzzing


def check_invariants(parsed, inst):
    assert isinstance(parsed, list)
    for p in parsed:
        assert isinstance(p, ParsedSolution) and isinstance(p.text, str)
        assert not p.reason.startswith("parser error"), p.reason
        if p.status == "malformed":
            assert p.solution is None and p.reason
        else:
            assert p.status in ("valid", "violation") and list(p.solution) == sorted(p.solution)
            assert p.reason == "; ".join(check_solution(inst, p.solution))
            assert (p.status == "valid") == (p.reason == "")


FRAGMENTS = [
    "Solution 1:",
    "**Solution 2:**",
    "Subset 3 -",
    "### Solution 4\n",
    "1. ",
    "- ",
    "{",
    "}",
    "[",
    "]",
    "\\{",
    "\\}",
    "\\left",
    "\\right",
    "\\text{",
    "\\boxed{",
    "$",
    "`",
    "*",
    "_",
    "+",
    "=",
    " + ",
    " = ",
    ", ",
    ",",
    " ",
    "\n",
    "\r\n",
    "3",
    "17",
    "35",
    "16",
    "19",
    "-4",
    "1.5",
    "...",
    "…",
    "given",
    "set of",
    "9" * 130,
    "٣",
    "\\",
    "(sum = 35)",
    "Total 3 feasible solutions",
    "\uff0c",
    "\u2212",
]
ANSWER_LIKE = st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=5), max_size=40).map("".join)


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=300) | ANSWER_LIKE)
def test_parse_answer_never_raises(text):
    check_invariants(parse_answer(text, DEMO), DEMO)


NOISE = st.text(alphabet="abcdefghijklmnopqrstuvwxyz ABCDEFGHIJ SOLUTION.,;:!?'\"()-+=*_`$#>/\\\t", max_size=30)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(attempt=st.integers(0, 10_000), data=st.data())
def test_rendered_solutions_parse_back_in_any_order_with_noise(attempt, data):
    inst = generate_instance(attempt_rng(TASK, 1, attempt))
    solutions = enumerate_solutions(inst)
    order = data.draw(st.permutations(solutions))
    chosen = order[: data.draw(st.integers(1, min(len(order), 12)))]
    lines = [data.draw(NOISE)]
    # noise before a heading never reads as a checking step ("CHECk Solution 1: ..."),
    for k, s in enumerate(chosen, start=1):
        # which the parser skips by design (a re-check)
        before = data.draw(NOISE.filter(lambda t: not _CHECKING.search(t)))
        lines.append(f"{before} {render_solution(inst, s, k)} {data.draw(NOISE)}")
        lines.append(data.draw(NOISE))
    parsed = parse_answer("\n".join(lines), inst)
    check_invariants(parsed, inst)
    assert [p.status for p in parsed] == ["valid"] * len(chosen)
    assert [p.solution for p in parsed] == list(chosen)
    assert valid_solutions(parsed) == set(chosen)


@settings(max_examples=100, deadline=None)
@given(attempt=st.integers(0, 10_000), data=st.data())
def test_listed_sets_parse_back_without_headings(attempt, data):
    inst = generate_instance(attempt_rng(TASK, 2, attempt))
    solutions = enumerate_solutions(inst)
    chosen = data.draw(st.permutations(solutions))[: data.draw(st.integers(1, min(len(solutions), 12)))]
    styles = ["- {%s}", "* [%s]", "$\\{%s\\}$", "**{%s}**", "{%s} (sum)", "%+"]  # %+: written as a sum
    lines = []
    for s in chosen:
        lines.append(data.draw(NOISE))
        style = data.draw(st.sampled_from(styles))
        if style == "%+" and len(s) > 1:
            lines.append(" + ".join(map(str, s)) + f" = {inst.target}")
        else:
            lines.append(style.replace("%+", "{%s}").replace("%s", ", ".join(map(str, s))))
    parsed = parse_answer("\n".join(lines), inst)
    check_invariants(parsed, inst)
    assert [p.solution for p in parsed] == list(chosen)
    assert all(p.status == "valid" for p in parsed)


# ---------------------------------------------------------------- precision's denominator and truncated replies (by hand)

SMALL = SubsetSumInstance((1, 5, 6, 7, 11, 12), 18)  # solutions {1,5,12} {1,6,11} {5,6,7} {6,12} {7,11}


def test_a_malformed_answer_is_a_wrong_answer():
    from reasoning_study.tasks.core import UnreadableAnswer, listed_solutions

    parsed = parse_answer("Solution 1: {1, 5, 12}\nSolution 2: {1.5, 4.5}", SMALL)
    assert [(p.status, p.cut_off) for p in parsed] == [("valid", False), ("malformed", False)]
    assert listed_solutions(parsed) == {(1, 5, 12), UnreadableAnswer("{1.5, 4.5}")}  # |Y| = 2: precision 1/2 (eq. 2)
    # the same unreadable answer twice is one answer, as a repeated solution is
    again = parse_answer(
        "Solution 1: {1.5, 4.5}\n**Solution 2:** {1.5,4.5}\nSolution 3: {6, 12}\nSolution 4: {6, 12}", SMALL
    )
    assert listed_solutions(again) == {(6, 12), UnreadableAnswer("{1.5, 4.5}"), UnreadableAnswer("{1.5,4.5}")} or len(
        listed_solutions(again)
    ) in (2, 3)


@pytest.mark.parametrize(
    "text, truncated, expected",
    [
        ("Solution 1: {6, 12}\nSolution 2: 6, 1", False, [(6, 12), (1, 6)]),  # read as written
        ("Solution 1: {6, 12}\nSolution 2: 6, 1", True, [(6, 12), "cut"]),  # was going to say 6, 12 or 6, 1, 11
        ("Solution 1: {6, 12}\nSolution 2: 1 + 5 + 1", False, [(6, 12), (1, 1, 5)]),
        ("Solution 1: {6, 12}\nSolution 2: 1 + 5 + 1", True, [(6, 12), "cut"]),
        ("Solution 1: {6, 12}\nSolution 2: 7 and 1", True, [(6, 12), "cut"]),
        ("Solution 1: {6, 12}\nSolution 2: 7 an", True, [(6, 12), "cut"]),  # inside 'and'
        ("Solution 1: {6, 12}\nSolution 2: 1, 5,", True, [(6, 12), "cut"]),
        ("Solution 1: {6, 12}\nSolution 2: 1, 5,", False, [(6, 12), "unfinished"]),
        ("Solution 1: {6, 12}\nSolution 2: (1, 6", True, [(6, 12), "cut"]),
        ("Solution 1: {6, 12}\nSolution 2: {1, 6", False, [(6, 12), "unfinished"]),
        ("Solution 1: {6, 12}\nSolution 2:", True, [(6, 12), "cut"]),
        ("Solution 1: {6, 12}\nSolution 2:", False, [(6, 12)]),  # a bare heading is no answer
        ("Solution 1:\nSolution 2: {6, 12}", False, [(6, 12)]),
        ("Solution 1: {6, 12}\nSolution 2: none le", True, [(6, 12), "cut"]),
        ("Solution 1: {6, 12}\nSolution 2: {7, 11}", True, [(6, 12), (7, 11)]),  # closed: complete
        ("Solution 1: {6, 12}\nSolution 2: 7 + 11 = 18", True, [(6, 12), (7, 11)]),  # '=' closes the elements
        ("Solution 1: {6, 12}\nSolution 2: 7, 11 ✓", True, [(6, 12), (7, 11)]),
        ("Solution 1: {6, 12}\nSolution 2: 7, 11\nLet me check the", True, [(6, 12), (7, 11)]),
        ("- {6, 12}\n- 7 + 1", True, [(6, 12), "cut"]),
        ("- {6, 12}\n- 7 + 1", False, [(6, 12), (1, 7)]),
        ("- {6, 12}\n1) 7, 1", True, [(6, 12), "cut"]),
        ("The subsets are {6, 12} and {7,", True, [(6, 12), "cut"]),
    ],
)
def test_the_last_entry_of_a_truncated_reply(text, truncated, expected):
    parsed = parse_answer(text, SMALL, truncated=truncated)
    read = ["cut" if p.cut_off else (p.reason if p.status == "malformed" else p.solution) for p in parsed]
    assert read == expected
    assert all(p.status == "malformed" and p.solution is None for p in parsed if p.cut_off)
    assert sum(p.cut_off for p in parsed) <= 1 and not any(p.cut_off for p in parsed[:-1])


# ---------------------------------------------------------------- answers as real models write them (by hand)


@pytest.mark.parametrize(
    "text",
    [
        "Solution 1: (16, 19)\nSolution 2: (35,)\nSolution 3: (1, 6, 9, 19)\nSolution 4: (4, 6, 9, 16)",  # tuples
        "The subsets are (16, 19), (35,), (1, 6, 9, 19) and (4, 6, 9, 16).",
        "- 16 + 19 = 35\n- 35 = 35\n- 1 + 6 + 9 + 19 = 35\n- 4 + 6 + 9 + 16 = 35",  # sums as list items
        "1) 16+19\n2) 35 = 35\n3) 1+6+9+19\n4) 4+6+9+16",  # numbered lines
        "Solution 1: 16 and 19\nSolution 2: 35\nSolution 3: 1, 6, 9 and 19\nSolution 4: 4, 6, 9, and 16",  # 'and'
        "Solution 1: 16, 19\nSolution 2: 35\nSolution 3: 1, 6, 9, 19\nSolution 4: 4, 6, 9, 16",  # bare lists
        "- 16 and 19\n- {35}\n- 1, 6, 9, 19\n- 4 & 6 & 9 & 16",
        "```\nSolution 1: {16, 19}\nSolution 2: {35}\nSolution 3: {1, 6, 9, 19}\nSolution 4: {4, 6, 9, 16}\n```",  # code block
        "```python\nsolutions = [(16, 19), (35,), (1, 6, 9, 19), (4, 6, 9, 16)]\nprint(len(solutions))\n```",
        '```json\n{"solutions": [[16, 19], [35], [1, 6, 9, 19], [4, 6, 9, 16]], "count": 4}\n```',
        "| # | Subset | Sum |\n|---|---|---|\n| 1 | {16, 19} | 35 |\n| 2 | {35} | 35 |\n| 3 | 1, 6, 9, 19 | 35 |\n| 4 | 4 + 6 + 9 + 16 | 35 |",
        "| Solution | Elements | Sum | Valid |\n|:-:|:-:|:-:|:-:|\n| Solution 1 | 16, 19 | 35 | ✓ |\n| Solution 2 | 35 | 35 | ✓ |\n"
        "| Solution 3 | 1, 6, 9, 19 | 35 | ✓ |\n| Solution 4 | 4, 6, 9, 16 | 35 | ✓ |",
        r"**Solution 1:** $\{16, 19\}$"
        + "\n"
        + r"**Solution 2:** $\{35\}$"
        + "\n"
        + r"**Solution 3:** $\{1, 6, 9, 19\}$"
        + "\n"
        + r"**Solution 4:** $\left\{4, 6, 9, 16\right\}$",
    ],
)
def test_real_model_forms(text):
    parsed = parse_answer(text, DEMO)
    assert [p.status for p in parsed] == ["valid"] * 4, [(p.status, p.solution, p.reason) for p in parsed]
    assert sorted(p.solution for p in parsed) == DEMO_SOLUTIONS


@pytest.mark.parametrize(
    "text",
    [
        "We need subsets of {19, 4, 41, 40, 1, 16, 9, 35, 6, 27} that sum to 35.",  # the problem restated
        "Sorted: 1, 4, 6, 9, 16, 19, 27, 35, 40, 41\n- 1, 4, 6, 9, 16, 19, 27, 35, 40, 41",
        "Trying 27 + 6 = 33, too small; 27 + 6 + 1 = 34.\n- 27 + 4 = 31\n1) 27 + 6 = 33",  # partial sums
        "| Subset | Sum | Valid |\n|---|---|---|\n| {27, 6} | 33 | ✗ |\n| 16, 9 | 25 | no |",  # a table of checks
        "Checking solution 1: correct.\nVerification of subset 2: ok",  # checking steps
        "Total 4 feasible solutions shown above.",
    ],
)
def test_what_is_not_an_answer(text):
    assert parse_answer(text, DEMO) == []


def test_checking_steps_between_answers_add_nothing():
    text = (
        "Let me list them.\nSolution 1: {16, 19}\nChecking solution 1: 16 + 19 = 35, yes.\nSolution 2: {35}\n"
        "| Subset | Sum | Valid |\n|---|---|---|\n| {27, 6} | 33 | ✗ |\nSolution 3: 1 + 6 + 9 + 19 = 35\nSolution 4: 4, 6, 9, 16 (sum = 35)"
    )
    assert [(p.status, p.solution) for p in parse_answer(text, DEMO)] == [
        ("valid", (16, 19)),
        ("valid", (35,)),
        ("valid", (1, 6, 9, 19)),
        ("valid", (4, 6, 9, 16)),
    ]


# ---------------------------------------------------------------- every style, fuzzed: rendered, surrounded by prose, read back


def _csv(s):
    return ", ".join(map(str, s))


def _and(s):
    return str(s[0]) if len(s) == 1 else ", ".join(map(str, s[:-1])) + " and " + str(s[-1])


def _sum(s, t):
    return " + ".join(map(str, s)) + f" = {t}"


HEADED = {  # style -> (solution, index, target) -> text
    "set": lambda s, k, t: f"Solution {k}: {{{_csv(s)}}}",
    "tuple": lambda s, k, t: f"**Solution {k}:** ({_csv(s)}{',' if len(s) == 1 else ''})",
    "sum": lambda s, k, t: f"Solution {k}: {_sum(s, t)}",
    "bare": lambda s, k, t: f"Solution {k}: {_csv(s)}",
    "and": lambda s, k, t: f"### Subset {k}\n{_and(s)}",
    "latex": lambda s, k, t: f"**Solution {k}:** $\\{{{_csv(s)}\\}}$",
    "note": lambda s, k, t: f"{k}. Solution {k}: {_csv(s)} (sum = {t}) ✓",
}
UNHEADED = {  # style -> (solution, index, target) -> one line
    "set": lambda s, k, t: f"- {{{_csv(s)}}}",
    "tuple": lambda s, k, t: f"({_csv(s)}{',' if len(s) == 1 else ''})",
    "sum": lambda s, k, t: f"- {_sum(s, t)}",
    "numbered": lambda s, k, t: f"{k}) " + ("+".join(map(str, s)) if len(s) > 1 else f"{s[0]} = {t}"),
    "and": lambda s, k, t: f"- {_and(s)}" if len(s) > 1 else f"- {{{s[0]}}}",
    "bare": lambda s, k, t: f"{_csv(s)} ✓" if len(s) > 1 else f"{s[0]} = {t}",
    "latex": lambda s, k, t: f"$\\{{{_csv(s)}\\}}$",
}
# no digits, brackets, 'given', 'set of'
PROSE = st.text(alphabet="abcdefhijklmopqrtuwxyz ABCDEFHIJ.,;:!?'\"-*_", max_size=30)


def _chosen(data, inst, at_most=10):
    solutions = enumerate_solutions(inst)
    return data.draw(st.permutations(solutions))[: data.draw(st.integers(1, min(len(solutions), at_most)))]


def _fenced(data, lines):
    return (
        ["```" + data.draw(st.sampled_from(["", "text", "python"]))] + lines + ["```"]
        if data.draw(st.booleans())
        else lines
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(attempt=st.integers(0, 10_000), data=st.data())
def test_every_headed_style_parses_back(attempt, data):
    inst = generate_instance(attempt_rng(TASK, 3, attempt))
    chosen = _chosen(data, inst)
    lines = [inst.question(), data.draw(PROSE)]  # the problem restated before the first heading
    for k, s in enumerate(chosen, start=1):
        lines += [HEADED[data.draw(st.sampled_from(sorted(HEADED)))](s, k, inst.target), data.draw(PROSE)]
    text = "\n".join(_fenced(data, lines))
    for truncated in (False, True):
        parsed = parse_answer(text + "\nTotal solutions shown above.", inst, truncated=truncated)
        check_invariants(parsed, inst)
        assert [(p.status, p.solution) for p in parsed] == [("valid", s) for s in chosen], text


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(attempt=st.integers(0, 10_000), data=st.data())
def test_every_line_style_parses_back(attempt, data):
    inst = generate_instance(attempt_rng(TASK, 4, attempt))
    chosen = _chosen(data, inst)
    lines = [inst.question()]
    for k, s in enumerate(chosen, start=1):
        lines += [data.draw(PROSE), UNHEADED[data.draw(st.sampled_from(sorted(UNHEADED)))](s, k, inst.target)]
    text = "\n".join(_fenced(data, lines) + [data.draw(PROSE)])
    parsed = parse_answer(text, inst)
    check_invariants(parsed, inst)
    assert [(p.status, p.solution) for p in parsed] == [("valid", s) for s in chosen], text


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(attempt=st.integers(0, 10_000), data=st.data())
def test_tables_parse_back(attempt, data):
    inst = generate_instance(attempt_rng(TASK, 5, attempt))
    chosen = _chosen(data, inst)
    header, label = data.draw(
        st.sampled_from(
            [
                ("| # | Subset | Sum |", lambda k: str(k)),
                ("| Solution | Elements | Sum |", lambda k: f"Solution {k}"),
                ("| Subset # | Numbers | Total |", lambda k: str(k)),
            ]
        )
    )
    cell = {
        "set": lambda s: f"{{{_csv(s)}}}",
        "list": _csv,
        "sum": lambda s: " + ".join(map(str, s)),
        "tuple": lambda s: f"({_csv(s)}{',' if len(s) == 1 else ''})",
        "and": _and,
    }
    rows = [header, "|---|---|---|"]
    for k, s in enumerate(chosen, start=1):
        rows.append(f"| {label(k)} | {cell[data.draw(st.sampled_from(sorted(cell)))](s)} | {inst.target} |")
        # a checked attempt: its sum is not the target
        if data.draw(st.booleans()) and (wrong := min(inst.values)) != inst.target:
            rows.append(f"| {label(k)}b | {{{wrong}}} | {wrong} |")
    text = "\n".join([data.draw(PROSE)] + rows + [data.draw(PROSE)])
    parsed = parse_answer(text, inst)
    check_invariants(parsed, inst)
    assert [(p.status, p.solution) for p in parsed] == [("valid", s) for s in chosen], text


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(attempt=st.integers(0, 10_000), data=st.data())
def test_a_truncated_reply_lists_exactly_its_complete_entries(attempt, data):
    "Cut anywhere: the entries read are the first ones, each exactly as written; every entry with text after it is read."
    inst = generate_instance(attempt_rng(TASK, 6, attempt))
    chosen = _chosen(data, inst, at_most=6)
    headed = data.draw(st.booleans())
    styles = HEADED if headed else UNHEADED
    text, starts, ends = inst.question() + "\n" if headed else "", [], []
    for k, s in enumerate(chosen, start=1):
        starts.append(len(text))
        text += styles[data.draw(st.sampled_from(sorted(styles)))](s, k, inst.target)
        ends.append(len(text))
        text += "\n" + data.draw(PROSE) + "\n"
    cut = data.draw(st.integers(0, len(text)))
    prefix = text[:cut]
    parsed = parse_answer(prefix, inst, truncated=True)
    check_invariants(parsed, inst)
    answers = [p for p in parsed if not p.cut_off]
    assert [(p.status, p.solution) for p in answers] == [("valid", s) for s in chosen[: len(answers)]], prefix
    complete = sum(end <= cut and prefix[end:].strip() != "" for end in ends)
    # an entry cut after its last element may be read
    assert complete <= len(answers) <= sum(start < cut for start in starts), prefix
