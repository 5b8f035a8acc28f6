"""The difficulty filter: a table of selections on recorded probe outcomes, and properties on random outcomes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from recipes.swe.difficulty import classify, select_by_difficulty, solved_count, stratified_take

# k = 4 probe rewards per task, as the probe runner records them (1.0 resolved, 0.0 not; failed rollouts as 0.0).
RECORDED = {
    "astropy-1": [1.0, 1.0, 1.0, 1.0],  # solved 4/4: dropped
    "django-2": [1.0, 1.0, 1.0, 1.0],  # solved 4/4: dropped
    "flask-3": [1.0, 0.0, 0.0, 0.0],  # mixed
    "flask-4": [0.0, 1.0, 1.0, 0.0],  # mixed
    "sympy-5": [1.0, 1.0, 1.0, 0.0],  # mixed
    "sympy-6": [0.5, 1.0, 0.0, 0.0],  # mixed (0.5 is below the default pass threshold)
    "pylint-7": [0.0, 0.0, 0.0, 0.0],  # unsolved
    "pylint-8": [0.0, 0.0, 0.0, 0.0],  # unsolved
    "xarray-9": [0.9, 0.9, 0.0, 0.0],  # unsolved at threshold 1.0, mixed at 0.5
    "requests-10": [True, False, False, False],  # solved flags work too: mixed
}
MIXED = {"flask-3", "flask-4", "sympy-5", "sympy-6", "requests-10"}
UNSOLVED = {"pylint-7", "pylint-8", "xarray-9"}


@pytest.mark.parametrize(
    ("n_mixed", "n_unsolved", "n_heldout", "threshold", "expected"),
    [  # expected: (train_mixed, train_unsolved, val_mixed, val_unsolved, unused)
        (5, 3, 0, 1.0, (5, 3, 0, 0, 0)),
        (2, 1, 0, 1.0, (2, 1, 0, 0, 5)),
        (10, 10, 4, 1.0, (2, 2, 3, 1, 0)),  # val 4 of 5 mixed + 3 unsolved: 2.5 mixed rounds to 3
        (1, 1, 2, 1.0, (1, 1, 1, 1, 4)),  # val 2: 1.25 mixed rounds to 1
        (9, 9, 20, 1.0, (0, 0, 5, 3, 0)),  # val first: it takes the whole pool
        (0, 9, 1, 1.0, (0, 3, 1, 0, 4)),  # val 1: 0.625 mixed rounds to 1
        (9, 9, 0, 0.5, (6, 2, 0, 0, 0)),  # threshold 0.5: xarray-9 (2 of 4) is mixed too
    ])
def test_selection_table(n_mixed, n_unsolved, n_heldout, threshold, expected):
    split = select_by_difficulty(RECORDED, k=4, n_mixed=n_mixed, n_unsolved=n_unsolved, n_heldout=n_heldout,
                                 seed=7, pass_threshold=threshold)
    c = split.counts
    assert (c.train_mixed, c.train_unsolved, c.val_mixed, c.val_unsolved, c.unused) == expected
    assert c.probed == 10 and c.solved == 2
    if threshold == 1.0:
        assert (c.mixed, c.unsolved) == (5, 3)
        assert {i for i, d in split.difficulty.items() if d == "mixed"} == MIXED
        assert sum(split.difficulty[i] == "mixed" for i in split.train) == c.train_mixed
        assert sum(split.difficulty[i] == "unsolved" for i in split.val) == c.val_unsolved
    assert not {"astropy-1", "django-2"} & set(split.train + split.val)
    assert split.solved["sympy-5"] == 3 and split.solved["requests-10"] == 1


def test_same_seed_same_split_whatever_the_input_order_and_other_seeds_differ():
    outcomes = {f"task-{i}": [float(i % 3 == 0), 0.0] for i in range(60)}
    reversed_outcomes = dict(reversed(list(outcomes.items())))
    first = select_by_difficulty(outcomes, k=2, n_mixed=10, n_unsolved=10, n_heldout=6, seed=3)
    again = select_by_difficulty(reversed_outcomes, k=2, n_mixed=10, n_unsolved=10, n_heldout=6, seed=3)
    assert (first.train, first.val) == (again.train, again.val)
    others = [select_by_difficulty(outcomes, k=2, n_mixed=10, n_unsolved=10, n_heldout=6, seed=s).train
              for s in range(4, 8)]
    assert any(train != first.train for train in others)


def test_helpers_and_bad_inputs():
    assert solved_count([1.0, 0.99, True, False]) == 2
    assert solved_count([0.6, 0.4], pass_threshold=0.5) == 1
    assert [classify(s, 4) for s in (0, 1, 3, 4)] == ["unsolved", "mixed", "mixed", "solved"]
    assert stratified_take(3, 0, 5) == (0, 3) and stratified_take(10, 2, 1) == (2, 1)
    assert stratified_take(4, 0, 0) == (0, 0) and stratified_take(3, 1, 9) == (0, 3)
    with pytest.raises(ValueError, match=r"exactly k=4.*'b': 3"):
        select_by_difficulty({"a": [0.0] * 4, "b": [0.0] * 3}, k=4, n_mixed=1, n_unsolved=1, n_heldout=0, seed=0)
    with pytest.raises(ValueError, match="record failed rollouts as reward 0.0"):
        solved_count([None, 1.0])
    with pytest.raises(ValueError, match="n_heldout=-1"):
        select_by_difficulty({}, k=4, n_mixed=1, n_unsolved=1, n_heldout=-1, seed=0)


@settings(max_examples=200, deadline=None)
@given(solved=st.lists(st.integers(0, 4), max_size=40), n_mixed=st.integers(0, 30), n_unsolved=st.integers(0, 30),
       n_heldout=st.integers(0, 30), seed=st.integers(0, 2**16))
def test_properties_disjoint_bounded_and_consistent(solved, n_mixed, n_unsolved, n_heldout, seed):
    outcomes = {f"t{i}": [1.0] * s + [0.0] * (4 - s) for i, s in enumerate(solved)}
    split = select_by_difficulty(outcomes, k=4, n_mixed=n_mixed, n_unsolved=n_unsolved, n_heldout=n_heldout,
                                 seed=seed)
    c = split.counts
    train, val = set(split.train), set(split.val)
    assert len(train) == len(split.train) and len(val) == len(split.val) and not train & val
    assert all(split.difficulty[i] != "solved" for i in train | val)
    assert (c.solved, c.unsolved) == (solved.count(4), solved.count(0))
    assert c.mixed == len(solved) - c.solved - c.unsolved
    assert len(val) == min(n_heldout, c.mixed + c.unsolved)
    assert c.train_mixed <= n_mixed and c.train_unsolved <= n_unsolved
    assert c.train_mixed == min(n_mixed, c.mixed - c.val_mixed)
    assert c.train_unsolved == min(n_unsolved, c.unsolved - c.val_unsolved)
    assert c.train_mixed + c.train_unsolved == len(train) and c.val_mixed + c.val_unsolved == len(val)
    assert c.unused >= 0 and sum(v for k, v in c.as_dict().items() if k.startswith(("train", "val"))) + c.unused \
        == c.mixed + c.unsolved
    if c.mixed + c.unsolved:  # the held-out split mirrors the pool: its mixed share is within one task of it
        assert abs(c.val_mixed - len(val) * c.mixed / (c.mixed + c.unsolved)) <= 1


def test_levels_stratify_the_held_out_split_and_count_per_level():
    levels = {"flask-3": 0, "flask-4": 0, "sympy-5": 0, "pylint-7": 0, "sympy-6": 1, "requests-10": 1,
              "pylint-8": 1, "astropy-1": 1, "xarray-9": 3}  # django-2 left out: level 3
    split = select_by_difficulty(RECORDED, k=4, n_mixed=9, n_unsolved=9, n_heldout=4, seed=7, levels=levels)
    by_level = {level: sorted(levels.get(i, 3) for i in split.val if levels.get(i, 3) == level) for level in (0, 1, 3)}
    assert {level: len(ids) for level, ids in by_level.items()} == {0: 2, 1: 2, 3: 0}  # pools 4, 3, 1 of 8: 2, 1.5, 0.5
    # (the tie of remainders goes to the lower level)
    assert split.counts.levels[0] == {"probed": 4, "solved": 0, "mixed": 3, "unsolved": 1, "train": 2, "val": 2}
    assert split.counts.levels[1] == {"probed": 4, "solved": 1, "mixed": 2, "unsolved": 1, "train": 1, "val": 2}
    assert split.counts.levels[3] == {"probed": 2, "solved": 1, "mixed": 0, "unsolved": 1, "train": 1, "val": 0}
    flat = split.counts.as_dict()
    assert flat["level0_mixed"] == 3 and flat["level3_train"] == 1 and flat["probed"] == 10
    plain = select_by_difficulty(RECORDED, k=4, n_mixed=9, n_unsolved=9, n_heldout=4, seed=7)
    one_level = select_by_difficulty(RECORDED, k=4, n_mixed=9, n_unsolved=9, n_heldout=4, seed=7,
                                     levels=dict.fromkeys(RECORDED, 0))
    assert (plain.train, plain.val) == (one_level.train, one_level.val) and not plain.counts.levels
    assert not any(key.startswith("level") for key in plain.counts.as_dict())
