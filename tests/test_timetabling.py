"""TimeTabling: enumeration vs CP-SAT, the constraint checker, and the tolerant answer parser."""
import random

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from reasoning_study.tasks import timetabling as tt
from reasoning_study.tasks.core import TooManySolutions, attempt_rng, valid_solutions

CAP = 500


def _enumerate(fn, inst):
    try:
        return fn(inst, cap=CAP)
    except TooManySolutions:
        return "more than cap"


@pytest.mark.parametrize("seed", [11, 12])
def test_enumeration_matches_cpsat_on_random_instances(seed):
    n_compared = n_with_solutions = 0
    for attempt in range(150):
        inst = tt.generate_instance(attempt_rng(tt.TASK, seed, attempt))
        ours, theirs = _enumerate(tt.enumerate_solutions, inst), _enumerate(tt.cpsat_enumerate, inst)
        assert ours == theirs, f"attempt {attempt}: {inst}"
        if isinstance(ours, list):
            assert all(tt.check_solution(inst, s) == [] for s in ours)
            assert len(set(ours)) == len(ours)
            n_with_solutions += bool(ours)
        n_compared += 1
    assert n_compared == 150 and n_with_solutions > 30  # 300 instances in all, many with solutions


def test_checker_rejects_every_non_solution_of_small_instances():
    "Exhaustively: a schedule is feasible iff the checker accepts it, iff the enumerator lists it."
    from itertools import product
    for attempt in range(40):
        inst = tt.generate_instance(attempt_rng(tt.TASK, 3, attempt))
        if len(inst.courses) > 4: continue
        feasible = set(tt.enumerate_solutions(inst))
        for schedule in product(*(c.options() for c in inst.courses)):
            assert (tt.check_solution(inst, schedule) == []) == (schedule in feasible)


def _instance_with_solutions(seed, lo=2, hi=40):
    rng_attempt = 0
    while True:
        inst = tt.generate_instance(attempt_rng(tt.TASK, seed, rng_attempt))
        rng_attempt += 1
        sols = _enumerate(tt.enumerate_solutions, inst)
        if isinstance(sols, list) and lo <= len(sols) <= hi:
            return inst, sols


noise_line = st.text(alphabet=st.characters(blacklist_characters="0123456789|", blacklist_categories=["Cs", "Zl", "Zp", "Cc"]), max_size=60)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), data=st.data())
def test_rendered_solutions_parse_back_in_any_order_with_noise(seed, data):
    inst, sols = _instance_with_solutions(seed)
    chosen = data.draw(st.lists(st.sampled_from(sols), min_size=1, max_size=len(sols), unique=True))
    order = data.draw(st.permutations(chosen))
    parts = []
    for k, s in enumerate(order, start=1):
        parts += data.draw(st.lists(noise_line, max_size=2))
        parts.append(tt.render_solution(inst, s, k))
    parts += data.draw(st.lists(noise_line, max_size=2))
    parsed = tt.parse_answer("\n".join(parts), inst)
    assert valid_solutions(parsed) == set(chosen)


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=400))
def test_parser_never_raises_on_arbitrary_text(text):
    inst = tt.generate_instance(random.Random(0))
    for p in tt.parse_answer(text, inst):
        assert p.status in ("valid", "violation", "malformed")


table_fragment = st.sampled_from(["| Course0 | T1 | R2 | P0 |", "| Course1 | 2 | 0 | 1 |", "Solution 1:", "**Solution 2:**",
                                  "| Course | Time | Room | Teacher |", "|---|---|---|---|", "| Room | Time | Course |",
                                  "- Course2: Time 3, Room 1", "Course9: T1 R1", "| Course0 |", "|||", "Course0 T R", ""])


@settings(max_examples=300, deadline=None)
@given(lines=st.lists(st.one_of(table_fragment, st.text(max_size=30)), max_size=25))
def test_parser_never_raises_on_table_like_garbage(lines):
    inst = tt.TimeTablingInstance((tt.Course((1, 2), (0, 2), 0), tt.Course((2, 3), (0, 1), 1), tt.Course((1, 3), (1, 2), 0)))
    for p in tt.parse_answer("\n".join(lines), inst):
        assert p.status in ("valid", "violation", "malformed")
        assert (p.solution is None) == (p.status == "malformed")


def test_formatting_variants_are_the_same_solution():
    inst = tt.TimeTablingInstance((tt.Course((0, 2), (1,), 0), tt.Course((0, 1, 2), (0, 1), 1)))
    variants = [
        "Solution 1:\n| Course | Time | Room | Teacher |\n|---|---|---|---|\n| Course0 | T2 | R1 | P0 |\n| Course1 | T0 | R0 | P1 |",
        "**Solution 1:**\n| Course | Time | Room | Teacher |\n| Course0 | 2 | 1 | 0 |\n| Course1 | 0 | 0 | 1 |",
        "1. Schedule 1\n| Course | Room | Time |\n| **Course 0** | Room 1 | Time 2 |\n| Course 1 | Room 0 | Time 0 |",
        "### Solution 1\n- Course0: Time slot 2, Room 1\n- Course1: time 0, room 0",
        "| Course0 | T2 | R1 | P0 |\n| Course1 | T0 | R0 | P1 |",
    ]
    for text in variants:
        parsed = tt.parse_answer(text, inst)
        assert [(p.status, p.solution) for p in parsed] == [("valid", ((2, 1), (0, 0)))], text


def test_unknown_course_and_partial_tables_are_malformed():
    inst = tt.TimeTablingInstance((tt.Course((0, 2), (1,), 0), tt.Course((0, 1, 2), (0, 1), 1)))
    parsed = tt.parse_answer("Solution 1:\n| Course0 | T2 | R1 | P0 |\n| Course5 | T0 | R0 | P1 |\nSolution 2:\n| Course0 | T2 |", inst)
    assert [p.status for p in parsed] == ["malformed", "malformed"]
    assert "Course5" in parsed[0].reason


def test_cap_rejects_early():
    big = tt.TimeTablingInstance(tuple(tt.Course((0, 1, 2, 3), (0, 1, 2), k) for k in range(5)))
    with pytest.raises(TooManySolutions):
        tt.enumerate_solutions(big, cap=CAP)
