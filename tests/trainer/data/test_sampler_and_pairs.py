"""Condition sampling mass (docs/scope.md#condition-weights), its resumable state, and pair-file validation."""

import json
from collections import Counter

import numpy as np
import pytest

from selectrust.core.io import DataError
from trainer.data.train_data import ConditionSampler, ShuffleSampler, condition_mass
from trainer.dpo.data import load_pairs, unmatch_pairs

CONDS = ["clean", "misleading", "correct", "irrelevant"]


def _pool(sizes):
    out = []
    for c, n in zip(CONDS, sizes):
        out += [c] * n
    return out


def test_condition_mass_formula():
    # λ_p ρ and λ_p (1-ρ): 0.5*0.5 = 0.25 each; 0.6*0.25 = 0.15 and 0.6*0.75 = 0.45.
    assert condition_mass(lambda_m=0.25, lambda_c=0.25, lambda_p=0.5, rho=0.5) == \
        {"misleading": 0.25, "clean": 0.25, "correct": 0.25, "irrelevant": 0.25}
    m = condition_mass(lambda_m=0.3, lambda_c=0.1, lambda_p=0.6, rho=0.25)
    assert m["correct"] == pytest.approx(0.15) and m["irrelevant"] == pytest.approx(0.45)


@pytest.mark.parametrize("lam", [(0.25, 0.25, 0.5, 0.5), (0.5, 0.1, 0.4, 0.75), (1.0, 0.0, 0.0, 0.5)])
def test_empirical_frequencies_within_one_percent(lam):
    mass = condition_mass(lambda_m=lam[0], lambda_c=lam[1], lambda_p=lam[2], rho=lam[3])
    # Unequal pool sizes: the mass must not follow pool sizes.
    conditions = _pool([50, 200, 30, 120])
    s = ConditionSampler(conditions, mass, seed=3)
    draws = s.draw(10_000)
    freq = Counter(conditions[i] for i, _ in draws)
    for c in CONDS:
        assert abs(freq[c] / 10_000 - mass[c]) < 0.01, (c, freq[c], mass[c])


def test_loss_mode_weights_reproduce_the_mass_in_expectation():
    mass = condition_mass(lambda_m=0.25, lambda_c=0.25, lambda_p=0.5, rho=0.5)
    conditions = _pool([10, 30, 20, 40])  # N = 100
    s = ConditionSampler(conditions, mass, seed=0, mode="loss")
    draws = s.draw(100)  # exactly one epoch: every row once
    assert sorted(i for i, _ in draws) == list(range(100))
    # weight of a clean row = 0.25 / (10/100) = 2.5; summed per condition = mass * N
    total = Counter()
    for i, w in draws:
        total[conditions[i]] += w
    for c in CONDS:
        assert total[c] == pytest.approx(mass[c] * 100)


def test_sampler_state_resumes_exactly_mid_epoch_and_across_epochs():
    mass = condition_mass(lambda_m=0.25, lambda_c=0.25, lambda_p=0.5, rho=0.5)
    conditions = _pool([5, 7, 3, 9])  # N = 24
    a = ConditionSampler(conditions, mass, seed=11)
    full = a.draw(70)
    b = ConditionSampler(conditions, mass, seed=11)
    first = b.draw(29)  # crosses one epoch boundary
    state = json.loads(json.dumps(b.state_dict()))
    c = ConditionSampler(conditions, mass, seed=11)
    c.load_state_dict(state)
    assert first + c.draw(41) == full
    assert c.epoch == a.epoch == 2


def test_zero_mass_pool_is_never_drawn_and_missing_pool_is_an_error():
    mass = condition_mass(lambda_m=1.0, lambda_c=0.0, lambda_p=0.0, rho=0.5)
    conditions = _pool([4, 4, 4, 4])
    draws = ConditionSampler(conditions, mass, seed=0).draw(200)
    assert {conditions[i] for i, _ in draws} == {"misleading"}
    with pytest.raises(DataError, match="no clean pairs"):
        ConditionSampler(["misleading"] * 4, condition_mass(lambda_m=0.5, lambda_c=0.5, lambda_p=0, rho=0.5), seed=0)


def test_shuffle_sampler_is_a_permutation_per_epoch():
    s = ShuffleSampler(10, seed=1)
    d = [i for i, _ in s.draw(20)]
    assert sorted(d[:10]) == list(range(10)) and sorted(d[10:]) == list(range(10)) and d[:10] != d[10:]


# -- pair files ---------------------------------------------------------------------------------
def _write(tmp_path, rows, name="pairs.jsonl"):
    p = tmp_path / name
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p


def _quartet(pid, chosen="4", rejected="7"):
    return [{"pair_id": pid, "item_id": pid, "condition": c, "prompt": f"{c} q?", "chosen": chosen,
             "rejected": rejected} for c in CONDS]


def test_pairs_load_and_count_invalid(tmp_path):
    rows = _quartet("a") + _quartet("b", chosen="5", rejected="5") + _quartet("c", chosen="  ") + _quartet("d")[:3]
    ps = load_pairs(str(_write(tmp_path, rows)))
    assert ps.stats["per_condition"] == {c: 1 for c in CONDS}
    assert ps.stats["dropped"] == {"identical_chosen_rejected": 4, "empty_completion": 4,
                                   "incomplete_quartet_rows": 3}


@pytest.mark.parametrize("bad, message", [
    (lambda r: r[1].pop("rejected"), "line 2, field 'rejected': missing field"),
    (lambda r: r[2].update(condition="noisy"), "line 3, field 'condition': unknown condition 'noisy'"),
    (lambda r: r.append(dict(r[0])), "line 5, field 'condition': duplicate condition 'clean'"),
])
def test_pairs_structural_errors_name_file_line_field(tmp_path, bad, message):
    rows = _quartet("a")
    bad(rows)
    p = _write(tmp_path, rows)
    with pytest.raises(DataError) as e:
        load_pairs(str(p))
    assert str(p) in str(e.value) and message in str(e.value)


def test_pairs_on_invalid_error_rejects(tmp_path):
    p = _write(tmp_path, _quartet("a") + _quartet("b", chosen="5", rejected="5"))
    with pytest.raises(DataError, match="line 5.*identical chosen rejected"):
        load_pairs(str(p), on_invalid="error")
    p2 = _write(tmp_path, _quartet("a")[:3], "incomplete.jsonl")
    with pytest.raises(DataError, match="lacks conditions \\['irrelevant'\\]"):
        load_pairs(str(p2), on_invalid="error")


def test_empty_and_malformed_files(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(DataError, match="no records"):
        load_pairs(str(empty))
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(_quartet("a")[0]) + "\n{not json\n")
    with pytest.raises(DataError, match="line 2.*malformed JSON"):
        load_pairs(str(bad))


def test_unmatched_keeps_one_condition_per_quartet(tmp_path):
    rows = [r for i in range(40) for r in _quartet(f"p{i}")]
    ps = unmatch_pairs(load_pairs(str(_write(tmp_path, rows))), seed=0)
    assert len(ps.rows) == 40 and len({r["pair_id"] for r in ps.rows}) == 40
    assert len({r["condition"] for r in ps.rows}) == 4  # all four contexts still appear overall


def test_group_by_length_blocks_are_homogeneous_and_still_a_permutation():
    rng = np.random.default_rng(0)
    lengths = rng.integers(5, 200, size=1000)
    s = ShuffleSampler(1000, seed=4, lengths=lengths, block=10, blocks_per_chunk=8)
    draws = [i for i, _ in s.draw(1000)]
    assert sorted(draws) == list(range(1000))
    pad = lambda order: sum(max(lengths[order[i:i + 10]]) * 10 for i in range(0, 1000, 10))  # noqa: E731
    plain = [i for i, _ in ShuffleSampler(1000, seed=4).draw(1000)]
    assert pad(draws) < 0.75 * pad(plain)  # much less padding than a plain shuffle
    # Blocks come in random order (not a global short-to-long curriculum).
    block_max = [max(lengths[draws[i:i + 10]]) for i in range(0, 80, 10)]
    assert block_max != sorted(block_max)
    again = ShuffleSampler(1000, seed=4, lengths=lengths, block=10, blocks_per_chunk=8)
    again.load_state_dict({"epoch": 0, "position": 500})
    assert [i for i, _ in again.draw(500)] == draws[500:]
