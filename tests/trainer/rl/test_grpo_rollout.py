"""GRPO rollout source: drop/refill rule, advantages, micro-batches, resume state, bad input (fake backend);
rank-independent seeds and the global batch of several ranks (simulated with threads); per-row seeded
sampling of the HF backend."""

import json
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from selectrust.core.io import DataError
from selectrust.generation.prompts import PromptSettings
from tests.box2_fakes import ScriptedBackend, assert_same_microbatches
from trainer.config import GRPOAlgoConfig
from trainer.data.train_data import ShuffleSampler
from trainer.rl.rewards import GuardedReward, resolve_reward
from selectrust.generation.backends.base import derive_seed
from trainer.rl.rollout import (Group, Ranks, Rollout, RolloutSettings, RolloutSource, check_prompt_lengths, fill_batch,
                             load_rl_prompts, prompt_seed, rank_rows, share)
from trainer.rl.rollout_modes import SingleTurnMode


def _groups(reward_lists):
    return [Group(f"g{i}", [Rollout(f"g{i}", [1, 2], [0, 1], r) for r in rs]) for i, rs in enumerate(reward_lists)]


def test_fill_batch_drops_refills_and_pads():
    script = {0: [[1, 0], [1, 1], [0, 0]], 1: [[0, 0], [0, 1]], 2: [[1, 1]]}
    asked = []

    def gen(n, rnd):
        asked.append((n, rnd))
        return _groups(script[rnd])

    groups, stats = fill_batch(gen, num_groups=3, max_refill_rounds=2, drop_zero_variance=True)
    assert asked == [(3, 0), (2, 1), (1, 2)]
    assert [g.rewards for g in groups] == [[1, 0], [0, 1], [1, 1]]  # kept, kept, then the first dropped group
    assert stats == {"groups_generated": 6, "groups_dropped": 4, "groups_refilled": 1, "refill_rounds": 2,
                     "groups_padded_zero_variance": 1, "zero_variance_frac": 2 / 3, "zero_variance_groups": 4,
                     "rounds": 3, "groups_oversampled": 0, "groups_surplus": 0}


def test_fill_batch_without_refill_or_without_dropping():
    groups, stats = fill_batch(lambda n, r: _groups([[1, 0], [1, 1], [0, 0]]), num_groups=3, max_refill_rounds=0,
                               drop_zero_variance=True)
    assert stats["groups_padded_zero_variance"] == 2 and stats["refill_rounds"] == 0
    groups, stats = fill_batch(lambda n, r: _groups([[1, 1], [1, 0]]), num_groups=2, max_refill_rounds=3,
                               drop_zero_variance=False)
    assert [g.rewards for g in groups] == [[1, 1], [1, 0]] and stats["groups_generated"] == 2
    assert stats["zero_variance_frac"] == 0.5
    with pytest.raises(RuntimeError, match="returned 1 groups, expected 2"):
        fill_batch(lambda n, r: _groups([[1, 0]]), num_groups=2, max_refill_rounds=0, drop_zero_variance=True)


def test_fill_batch_oversampled_first_round_keeps_exactly_num_groups():
    """Round 0 draws ``first_round`` groups: the kept ones beyond num_groups are surplus (counted, not kept);
    a refill round still asks for the number missing when the draw falls short."""
    asked = []

    def gen(n, rnd):
        asked.append((n, rnd))
        return _groups({0: [[1, 0], [1, 1], [0, 1], [1, 0], [0, 1]], 1: [[1, 0], [0, 1]]}[rnd][:n])

    groups, stats = fill_batch(gen, num_groups=3, max_refill_rounds=2, drop_zero_variance=True, first_round=5)
    assert asked == [(5, 0)] and len(groups) == 3
    assert [g.item_id for g in groups] == ["g0", "g2", "g3"]  # the first three with signal, in generation order
    assert stats["rounds"] == 1 and stats["refill_rounds"] == 0 and stats["groups_generated"] == 5
    assert stats["groups_oversampled"] == 2 and stats["groups_surplus"] == 1 and stats["zero_variance_groups"] == 1
    asked.clear()
    groups, stats = fill_batch(lambda n, r: gen(n, r) if r else _groups([[1, 1], [0, 0], [1, 0], [0, 0]]),
                               num_groups=3, max_refill_rounds=2, drop_zero_variance=True, first_round=4)
    assert asked == [(2, 1)] and len(groups) == 3 and stats["rounds"] == 2  # 1 kept of 4: refill asks for 2
    with pytest.raises(ValueError, match="first_round=2 must be >= num_groups=3"):
        fill_batch(gen, num_groups=3, max_refill_rounds=0, drop_zero_variance=True, first_round=2)


def test_first_round_size_from_the_running_rate():
    from trainer.rl.oversample import ZeroVarianceRate, first_round_size

    assert first_round_size(8, None, 2.0) == 8          # nothing seen yet
    assert first_round_size(8, 0.0, 2.0) == 8
    assert first_round_size(8, 0.25, 2.0) == 11         # ceil(8 / 0.75): 11 x 0.75 >= 8
    assert first_round_size(8, 0.5, 2.0) == 16
    assert first_round_size(8, 0.6, 2.0) == 16          # capped at 2 x 8
    assert first_round_size(8, 1.0, 1.5) == 12
    assert first_round_size(8, 0.5, 1.0) == 8           # cap 1: no over-sampling
    with pytest.raises(ValueError, match="oversample_cap must be >= 1"):
        first_round_size(8, 0.5, 0.5)
    rate = ZeroVarianceRate()
    rate.update({"zero_variance_groups": 3, "groups_generated": 12})
    rate.update({"zero_variance_groups": 1, "groups_generated": 4})
    assert rate.rate == 0.25 and ZeroVarianceRate(**rate.state_dict()).rate == 0.25


ROWS = [{"item_id": f"i{k}", "prompt": f"key k{k}?", "gold": k, "answer_type": "numeric"} for k in range(6)]


def _script(request, j, seed):
    """gold 0: every sample right (a zero-variance group); otherwise only sample 0 is right."""
    gold = int(request.messages[-1]["content"][5])
    return str(gold) if (gold == 0 or j == 0) else "x"


def _settings(*, num_groups, grad_accum, seed, **algo):
    """RolloutSettings from the schema's GRPO defaults with ``algo`` overrides (group size 4)."""
    return RolloutSettings.from_config(GRPOAlgoConfig(group_size=4, **algo), num_groups=num_groups,
                                       grad_accum=grad_accum, prompt_settings=PromptSettings(), seed=seed)


def _source(tokenizer, *, num_iterations=1, old=None, script=_script, mask_truncated=False, max_new_tokens=4,
            grad_accum=2, seed=0):
    s = _settings(num_groups=2, grad_accum=grad_accum, seed=seed, num_iterations=num_iterations,
                  max_new_tokens=max_new_tokens, mask_truncated=mask_truncated, max_refill_rounds=2)
    backend = ScriptedBackend(tokenizer, script)
    mode = SingleTurnMode(s, tokenizer, GuardedReward(resolve_reward("numeric_match")))
    src = RolloutSource(ROWS, ShuffleSampler(len(ROWS), seed=seed), mode, settings=s, backend_factory=lambda: backend,
                        old_logps_fn=old)
    return src, backend


def test_rollout_batch_advantages_and_microbatches(tiny_tokenizer):
    src, backend = _source(tiny_tokenizer)
    mbs = [src.next_microbatch(), src.next_microbatch()]
    m = src.pop_metrics()
    # rewards [1,0,0,0] per kept group: mean 0.25, unbiased std 0.5 -> A = (0.75, -0.25 x3) / (0.5 + 1e-4)
    want = torch.tensor([0.75, -0.25, -0.25, -0.25]) / 0.5001
    for mb in mbs:
        assert mb["input_ids"].shape[0] == 4 and len(set(mb["item_ids"])) == 1
        torch.testing.assert_close(mb["advantages"], want)
        assert mb["old_logps"] is None
    # the zero-variance group (gold 0), if drawn, was dropped and replaced
    kept = {mbs[0]["item_ids"][0], mbs[1]["item_ids"][0]}
    assert "i0" not in kept
    drawn_zero = any(r.messages[-1]["content"] == "key k0?" for r in backend.requests)
    assert m["groups_dropped"] == float(drawn_zero) and m["groups_padded_zero_variance"] == 0
    # completion tokens: "d"+EOS (2) for sample 0, "x"+EOS (2) for the others -> 8 per micro-batch, 16 total
    assert all(int(mb["completion_mask"].sum()) == 8 for mb in mbs)
    assert mbs[0]["num_tokens"] == 16 / 2
    # every request carries its prompt's seed (rollout 0, round 0, position in the round's draw)
    assert [r.seed for r in backend.requests[:2]] == [prompt_seed(0, 0, 0, 0), prompt_seed(0, 0, 0, 1)]
    assert backend.requests[0].n == 4
    for key in ("reward_mean", "reward_std", "zero_variance_frac", "completion_len_mean", "time_generation_s",
                "generation_fraction", "reward_errors"):
        assert key in m
    # prompt tokens are masked, completion tokens are not
    row = mbs[0]
    L = int(row["attention_mask"][0].sum())
    assert row["completion_mask"][0, L - 2:L].tolist() == [1, 1] and row["completion_mask"][0, :L - 2].sum() == 0


def test_mask_truncated_excludes_length_finished_samples(tiny_tokenizer):
    long_if_wrong = lambda r, j, s: "1" if j == 0 else "abcdefgh"
    src, _ = _source(tiny_tokenizer, script=long_if_wrong, mask_truncated=True, max_new_tokens=4)
    mb = src.next_microbatch()
    # samples 1..3 hit max_new_tokens: their masks are zero; sample 0 keeps "1"+EOS
    assert mb["completion_mask"].sum(dim=1).tolist()[1:] == [0, 0, 0]
    assert src.pop_metrics()["truncated_frac"] == 0.75


def test_resume_mid_batch_reproduces_microbatches(tiny_tokenizer):
    def old(ids, att, cm):
        return (ids.float() * -0.01) * cm  # deterministic stand-in for the policy's log-probs

    a, _ = _source(tiny_tokenizer, num_iterations=2, old=old)
    first = [a.next_microbatch() for _ in range(3)]  # iteration 1 (2 micro-batches) + 1 of iteration 2
    state = json.loads(json.dumps(a.state_dict()))  # survives the JSON checkpoint
    assert state["batch"] is not None and state["cursor"] == 3
    rest_a = [a.next_microbatch() for _ in range(3)]
    b, backend_b = _source(tiny_tokenizer, num_iterations=2, old=old)
    b.load_state_dict(state)
    rest_b = [b.next_microbatch() for _ in range(3)]
    assert_same_microbatches(rest_a, rest_b)
    # the replayed micro-batch equals the first pass's (same batch, stored old log-probs)
    assert torch.equal(rest_a[0]["input_ids"], first[1]["input_ids"])
    torch.testing.assert_close(first[0]["old_logps"], old(first[0]["input_ids"], None, first[0]["completion_mask"]))
    # b regenerated only the next batch (1 generation round for it), with the seed of rollout 1
    assert backend_b.requests[0].seed == prompt_seed(0, 1, 0, 0)


def test_resume_at_batch_boundary_regenerates_identically(tiny_tokenizer):
    a, _ = _source(tiny_tokenizer)
    a.next_microbatch(); a.next_microbatch()
    state = a.state_dict()
    assert state["batch"] is None
    nxt = a.next_microbatch()
    b, _ = _source(tiny_tokenizer)
    b.load_state_dict(state)
    assert torch.equal(b.next_microbatch()["input_ids"], nxt["input_ids"])


def test_bad_input_before_generation(tiny_tokenizer, tmp_path):
    rows = [dict(ROWS[0], prompt="x" * 300, _path="p.jsonl", _line=1)]
    with pytest.raises(DataError, match=r"p.jsonl, line 1, field 'prompt'.*'i0' has \d+ tokens > data.max_prompt_len=64"):
        check_prompt_lengths(rows, tiny_tokenizer, max_prompt_len=64, prompt_settings=PromptSettings())
    f = tmp_path / "p.jsonl"
    f.write_text(json.dumps({"item_id": "a", "prompt": "q", "answer_type": "numeric"}) + "\n")
    with pytest.raises(DataError, match="line 1, field 'gold'"):
        load_rl_prompts(str(f))
    short = ScriptedBackend(tiny_tokenizer, _script)
    short.generate = lambda reqs, **k: [type("R", (), {"samples": [], "prompt_token_ids": []})() for _ in reqs]
    src, _ = _source(tiny_tokenizer)
    src._backend = short
    with pytest.raises(RuntimeError, match="returned 0 samples .* algo.group_size=4 \\(an empty or short group\\)"):
        src.next_microbatch()


def test_toy_prompts_and_box2_rows_load():
    rows = load_rl_prompts("toy:0/grpo_prompts.jsonl")
    assert rows and {"item_id", "prompt", "gold", "answer_type"} <= set(rows[0])
    bad = load_rl_prompts("toy:0/box2_heldout.jsonl", family="box2", conditions=["bad"])
    assert bad and all(r["condition"] == "bad" for r in bad)


# ---------------------------------------------------------------------------------------------------
# Several ranks: rank-independent seeds, one global batch (ranks simulated with threads)
# ---------------------------------------------------------------------------------------------------
def test_seeds_shares_and_rank_rows():
    seeds = {prompt_seed(0, n, r, k) for n in range(3) for r in range(3) for k in range(8)}
    assert len(seeds) == 72 and all(0 <= x < 2 ** 31 for x in seeds)  # distinct per (batch, round, prompt)
    assert prompt_seed(0, 1, 2, 3) == prompt_seed(0, 1, 2, 3) != prompt_seed(1, 1, 2, 3)
    assert derive_seed(5, 0) != derive_seed(5, 1)
    assert [share(5, r, 2) for r in range(2)] == [(0, 2), (2, 5)] and share(1, 0, 2) == (0, 0)
    # 2 micro-batches of 2 ranks x 2 samples: rank r gets its slice of each global micro-batch
    assert rank_rows(8, 0, 2, 2) == [0, 1, 4, 5] and rank_rows(8, 1, 2, 2) == [2, 3, 6, 7]
    assert rank_rows(6, 0, 1, 2) == list(range(6))
    with pytest.raises(ValueError, match="do not split"):
        rank_rows(6, 0, 2, 2)


class _FakeWorld:
    """``all_gather`` for ranks that are threads of one process (a barrier-synchronised exchange)."""

    def __init__(self, world):
        self.barrier, self.slots = threading.Barrier(world, timeout=30), [None] * world

    def all_gather(self, rank):
        def gather(obj):
            self.slots[rank] = obj
            self.barrier.wait()
            out = list(self.slots)
            self.barrier.wait()
            return out
        return gather


DIST_ROWS = [{"item_id": f"d{k}", "prompt": f"key k{k}?", "gold": int(str(k)[0]), "answer_type": "numeric"}
             for k in range(40)]


def _seeded_script(request, j, seed):
    """Stands in for sampling: the answer is a function of the request's seed and j only; about a third
    of the groups are all wrong or all right (zero variance), so rounds drop and refill."""
    gold = request.messages[-1]["content"][5]
    h = derive_seed(seed, j) % 7
    right = seed % 4 != 0 and (j == 0 or h % 2 == 0)  # a quarter all wrong; the rest mixed or all right
    return gold if right else "x" * (1 + h % 3)  # different lengths: ranks hold different token counts


def _dist_source(tokenizer, rank, world, gather, *, grad_accum, std_scaling, num_iterations):
    s = _settings(num_groups=4, grad_accum=grad_accum, seed=3, num_iterations=num_iterations,
                  max_new_tokens=6, std_scaling=std_scaling, max_refill_rounds=3)
    backend = ScriptedBackend(tokenizer, _seeded_script)
    old = (lambda ids, att, cm: (ids.float() * -0.01) * cm) if num_iterations > 1 else None
    mode = SingleTurnMode(s, tokenizer, GuardedReward(resolve_reward("numeric_match")))
    src = RolloutSource(DIST_ROWS, ShuffleSampler(len(DIST_ROWS), seed=3), mode, settings=s,
                        backend_factory=lambda: backend, old_logps_fn=old, ranks=Ranks(rank, world, gather))
    return src, backend


def _unpadded(mb):
    L = mb["attention_mask"].sum(dim=1).tolist()
    return [(mb["input_ids"][i, :n].tolist(), mb["completion_mask"][i, :n].tolist()) for i, n in enumerate(L)]


def _run_ranks(tokenizer, world, *, grad_accum, steps, std_scaling, num_iterations=1):
    """``steps`` optimizer steps on each of ``world`` simulated ranks: per rank, its micro-batches and metrics."""
    fake = _FakeWorld(world)

    def rank_fn(rank):
        src, backend = _dist_source(tokenizer, rank, world, fake.all_gather(rank), grad_accum=grad_accum,
                                    std_scaling=std_scaling, num_iterations=num_iterations)
        out = []
        for _ in range(steps):
            mbs = [src.next_microbatch() for _ in range(grad_accum)]
            out.append((mbs, src.pop_metrics()))
        return out, len(backend.requests), src

    with ThreadPoolExecutor(world) as pool:
        return list(pool.map(rank_fn, range(world)))


@pytest.mark.parametrize("std_scaling,num_iterations", [("batch", 1), ("group", 2)])
def test_two_ranks_build_exactly_the_single_process_batch(tiny_tokenizer, std_scaling, num_iterations):
    """Simulated 2 ranks (micro-batch 4 each, grad_accum 2) vs 1 process (micro-batch 8): every global
    micro-batch is the concatenation of the ranks' micro-batches (same samples, same advantages, same
    old log-probs), the drop/refill counts are the global ones, and the token_mean normaliser is the
    global count / (grad_accum * world)."""
    steps = 3 * num_iterations
    (single, _, _), = _run_ranks(tiny_tokenizer, 1, grad_accum=2, steps=steps, std_scaling=std_scaling,
                                 num_iterations=num_iterations)
    ranks = _run_ranks(tiny_tokenizer, 2, grad_accum=2, steps=steps, std_scaling=std_scaling,
                       num_iterations=num_iterations)
    dropped = refilled = oversampled = 0
    for step in range(steps):
        s_mbs, s_m = single[step]
        for i in range(2):
            parts = [ranks[r][0][step][0][i] for r in range(2)]
            assert [len(p["item_ids"]) for p in parts] == [4, 4]
            assert _unpadded(s_mbs[i]) == _unpadded(parts[0]) + _unpadded(parts[1])
            assert s_mbs[i]["item_ids"] == parts[0]["item_ids"] + parts[1]["item_ids"]
            torch.testing.assert_close(s_mbs[i]["advantages"], torch.cat([p["advantages"] for p in parts]),
                                       rtol=0, atol=0)
            assert all(p["num_tokens"] * 2 == s_mbs[i]["num_tokens"] for p in parts)
            if num_iterations > 1:
                for p, lo in zip(parts, (0, 4)):
                    n = p["old_logps"].shape[1]
                    torch.testing.assert_close(p["old_logps"], s_mbs[i]["old_logps"][lo:lo + 4, :n], rtol=0, atol=0)
        for r in range(2):
            m = ranks[r][0][step][1]
            for k in ("groups_generated", "groups_dropped", "groups_refilled", "refill_rounds",
                      "groups_padded_zero_variance", "reward_mean", "reward_std", "reward_mean_trained",
                      "rounds", "zero_variance_groups", "groups_oversampled", "groups_surplus"):
                if k in s_m:
                    assert m[k] == s_m[k], (step, r, k)
        dropped += s_m.get("groups_dropped", 0)
        refilled += s_m.get("groups_refilled", 0)
        oversampled += s_m.get("groups_oversampled", 0)
    assert dropped > 0 and refilled > 0 and oversampled > 0  # the test exercises drop, refill and over-sampling
    # the two ranks generated disjoint shares: together as many requests as the single process
    assert ranks[0][1] + ranks[1][1] == single_requests(tiny_tokenizer, steps, std_scaling, num_iterations)


def test_oversampled_first_round_from_the_running_rate_and_exact_resume(tiny_tokenizer):
    """After a batch with zero-variance groups, the next batch's first round draws more prompts (one
    generation round where the refill rounds were); the rate is saved with the source, so a source resumed
    at the batch boundary draws the same prompts and builds the same batch."""
    src, _ = _dist_source(tiny_tokenizer, 0, 1, None, grad_accum=2, std_scaling="group", num_iterations=1)
    steps = []
    for _ in range(3):
        mbs = [src.next_microbatch() for _ in range(2)]
        steps.append((mbs, src.pop_metrics()))
        if _ == 0:
            state = json.loads(json.dumps(src.state_dict()))
    first, later = steps[0][1], [m for _, m in steps[1:]]
    assert first["groups_oversampled"] == 0 and first["zero_variance_groups"] > 0
    assert all(m["groups_oversampled"] > 0 for m in later)
    assert all(m["groups_generated"] == m["groups_generated_per_kept"] * 4 for _, m in steps)
    assert state["zero_variance"] == {"zero_variance": int(first["zero_variance_groups"]),
                                      "generated": int(first["groups_generated"])}
    resumed, _ = _dist_source(tiny_tokenizer, 0, 1, None, grad_accum=2, std_scaling="group", num_iterations=1)
    resumed.load_state_dict(state)
    again = [resumed.next_microbatch() for _ in range(2)]
    assert [_unpadded(mb) for mb in again] == [_unpadded(mb) for mb in steps[1][0]]
    assert resumed.pop_metrics()["groups_oversampled"] == later[0]["groups_oversampled"]
    # tokens per step: every row whole, and with the prompts shared
    m = steps[0][1]
    assert m["tokens_per_step_shared"] < m["tokens_per_step"] and 0 < m["prompt_token_fraction_saved"] < 1
    assert m["shared_prompt_fallback_groups"] == 0


def single_requests(tokenizer, steps, std_scaling, num_iterations):
    (_, n, _), = _run_ranks(tokenizer, 1, grad_accum=2, steps=steps, std_scaling=std_scaling,
                            num_iterations=num_iterations)
    return n


def test_a_rank_resumes_mid_batch_from_the_main_process_state(tiny_tokenizer):
    """Only the main process writes the source state; the stored batch is the global one, so rank 1
    resumed from rank 0's state serves its own remaining micro-batches."""
    fake = _FakeWorld(2)
    srcs = [_dist_source(tiny_tokenizer, r, 2, fake.all_gather(r), grad_accum=2, std_scaling="group",
                         num_iterations=2)[0] for r in range(2)]
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda s: [s.next_microbatch() for _ in range(3)], srcs))
    state = json.loads(json.dumps(srcs[0].state_dict()))
    assert state["batch"] is not None
    rest = [srcs[1].next_microbatch()]
    resumed = _dist_source(tiny_tokenizer, 1, 2, lambda obj: pytest.fail("no collective expected"), grad_accum=2,
                           std_scaling="group", num_iterations=2)[0]
    resumed.load_state_dict(state)
    got = resumed.next_microbatch()
    for k in ("input_ids", "completion_mask", "advantages", "old_logps"):
        assert torch.equal(got[k], rest[0][k]), k


def test_a_failure_on_one_rank_stops_every_rank_with_that_error(tiny_tokenizer):
    """Rank 1's backend fails (e.g. a dead server): rank 0, which generated fine, raises the same error
    type instead of waiting forever for the next collective."""
    from selectrust.generation.backends.vllm_server import ServerUnreachableError

    fake = _FakeWorld(2)
    srcs = []
    for r in range(2):
        src, backend = _dist_source(tiny_tokenizer, r, 2, fake.all_gather(r), grad_accum=2, std_scaling="group",
                                    num_iterations=1)
        if r == 1:
            def dead(reqs, **kw):
                raise ServerUnreachableError("cannot reach http://x")
            backend.generate = dead
        srcs.append(src)

    def attempt(src):
        try:
            src.next_microbatch()
        except ServerUnreachableError as e:
            return str(e)
        return None

    with ThreadPoolExecutor(2) as pool:
        assert list(pool.map(attempt, srcs)) == ["cannot reach http://x"] * 2


# ---------------------------------------------------------------------------------------------------
# HF backend: per-row seeded sampling
# ---------------------------------------------------------------------------------------------------
def test_hf_seeded_samples_do_not_depend_on_the_batch(tiny_model, tiny_tokenizer):
    from selectrust.generation.backends.base import GenerationRequest
    from selectrust.generation.backends.hf import HFBackend

    torch.manual_seed(0)
    backend = HFBackend(tiny_model, tiny_tokenizer, batch_size=32)
    reqs = [GenerationRequest(prompt=f"key k{i}{'?' * i}\n", n=3, max_new_tokens=8, temperature=1.0, seed=100 + i)
            for i in range(5)]
    ids = lambda res: [s.token_ids for s in res.samples]  # noqa: E731
    everything = [ids(r) for r in backend.generate(reqs)]
    # other batch mates, another order, a smaller batch size, another global RNG state: same samples
    torch.manual_seed(123)
    assert [ids(r) for r in backend.generate([reqs[4], reqs[1]])] == [everything[4], everything[1]]
    small = HFBackend(tiny_model, tiny_tokenizer, batch_size=2)
    assert [ids(r) for r in small.generate(reqs[2:])] == everything[2:]
    # the n samples of a request and requests with different seeds are different draws
    assert len({tuple(t) for row in everything for t in row}) == 15
    # a different seed changes the draws; the seed is per request (derive_seed(seed, j) per sample)
    other = backend.generate([GenerationRequest(prompt=reqs[0].prompt, n=3, max_new_tokens=8, temperature=1.0,
                                                seed=999)])
    assert ids(other[0]) != everything[0]


def test_hf_seeded_sampling_draws_from_the_temperature_top_p_distribution(tiny_model, tiny_tokenizer):
    """First-token frequencies over 3000 seeded rows match softmax(logits / T) restricted to the top-p
    nucleus (renormalised); tokens outside the nucleus never appear."""
    from transformers import TopPLogitsWarper

    from selectrust.generation.backends.hf import HFBackend

    backend = HFBackend(tiny_model, tiny_tokenizer)
    prompt = tiny_tokenizer("key k3 is\n", add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        logits = tiny_model(input_ids=torch.tensor([prompt])).logits[0, -1].float()
    T, top_p, n = 0.1, 0.5, 3000  # the tiny model is near-uniform: sharpen it (19 tokens in the nucleus)
    scores = TopPLogitsWarper(top_p)(None, (logits / T).unsqueeze(0))[0]
    p = torch.softmax(scores, dim=-1)
    out = backend._generate_batch([prompt] * n, 1, T, top_p, (), None, row_seeds=list(range(n)))
    counts = torch.bincount(torch.tensor([s.token_ids[0] for s in out]), minlength=p.numel()).double()
    assert counts[p == 0].sum() == 0
    # every token's count within 4.5 binomial standard deviations (plus 1) of n * p
    sd = (n * p * (1 - p)).double().sqrt()
    assert bool(((counts - n * p.double()).abs() <= 4.5 * sd + 1).all())
    assert (p > 0).sum() > 5 and int((counts > 0).sum()) > 5  # a real distribution, not a near-argmax


SHORT_ROWS = [{"item_id": f"c{k}", "prompt": f"On which continent is Kenya {k}?", "gold": "Africa",
               "wrong_value": "Europe", "answer_type": "short_text", "relation": "continent", "subject": "Kenya"}
              for k in range(4)]
#: sample j of every group: correct, a list of two continents (multiple), a hedge, no answer
SHORT_TEXTS = ["Nairobi, Kenya, Africa.", "Africa and Asia.", "Either Africa or Europe.", "I don't know."]


def test_rollout_answer_status_counts_per_step(tiny_tokenizer):
    """Each step logs how many generated rollouts the judge reads as multiple, hedged and without an answer
    (every round counted, dropped groups too), beside how many it read."""
    s = _settings(num_groups=2, grad_accum=1, seed=0, max_new_tokens=64, max_refill_rounds=0,
                  drop_zero_variance=False)
    backend = ScriptedBackend(tiny_tokenizer, lambda request, j, seed: SHORT_TEXTS[j])
    mode = SingleTurnMode(s, tiny_tokenizer, GuardedReward(resolve_reward("answer_match")))
    src = RolloutSource(SHORT_ROWS, ShuffleSampler(len(SHORT_ROWS), seed=0), mode, settings=s,
                        backend_factory=lambda: backend)
    src.next_microbatch()
    m = src.pop_metrics()
    assert (m["rollout/multiple"], m["rollout/hedged"], m["rollout/no_answer"], m["rollout/judged"]) == (2, 2, 2, 8)
    assert m["reward_mean"] == 0.25  # only the chain ending on Africa is rewarded


def test_rollout_without_judgeable_rows_logs_no_status_counts(tiny_tokenizer):
    src, _ = _source(tiny_tokenizer)
    src.next_microbatch()
    m = src.pop_metrics()
    assert m["rollout/judged"] == 8 and m["rollout/multiple"] == 0  # numeric rows: read, none unanswered by kind
    rows = [{k: v for k, v in r.items() if k != "answer_type"} for r in ROWS]
    s = _settings(num_groups=2, grad_accum=1, seed=0, max_refill_rounds=0)
    mode = SingleTurnMode(s, tiny_tokenizer, GuardedReward(lambda text, row: 0.0))
    src = RolloutSource(rows, ShuffleSampler(len(rows), seed=0), mode, settings=s,
                        backend_factory=lambda: ScriptedBackend(tiny_tokenizer, _script))
    src.next_microbatch()
    assert not any(k.startswith("rollout/") for k in src.pop_metrics())
