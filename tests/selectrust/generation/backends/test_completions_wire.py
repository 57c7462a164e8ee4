"""The /v1/completions wire format (selectrust/generation/backends/completions_wire.py): request bodies and reply parsing, on
plain JSON, no server."""

from __future__ import annotations

import pytest

from selectrust.generation.backends.base import GenerationRequest, derive_seed
from selectrust.generation.backends.completions_wire import (parse_prompt_logprobs, parse_text_choice, parse_token_choices,
                                                  prompt_logprobs_body, text_completion_body, token_completion_body)
from selectrust.generation.backends.transport import ServerResponseError
from selectrust.generation.backends.vllm_server import SAMPLING_FIELDS


def _ctx() -> str:
    return "\n[log tail]"


def _choice(index: int, ids: list[int], finish: str = "stop") -> dict:
    return {"index": index, "text": f"t{index}", "finish_reason": finish,
            "logprobs": {"tokens": [f"token_id:{i}" for i in ids], "token_logprobs": [-0.5] * len(ids)}}


def test_token_body_pins_the_sampling_fields_and_asks_for_token_ids():
    body = token_completion_body("m", [[1, 2]], 2, 8, 1.0, 0.9, ("\n",), None, sampling=SAMPLING_FIELDS["vllm"])
    assert body["top_k"] == -1 and body["min_p"] == 0.0 and body["repetition_penalty"] == 1.0
    assert body["logprobs"] == 1 and body["return_tokens_as_token_ids"] and not body["add_special_tokens"]
    assert body["stop"] == ["\n"] and "seed" not in body
    assert token_completion_body("m", [[1]], 1, 8, 1.0, 1.0, (), 7, sampling={})["seed"] == 7


def test_token_choices_are_grouped_by_index_per_prompt():
    out = {"choices": [_choice(3, [9]), _choice(0, [1, 2], "length"), _choice(2, [7]), _choice(1, [5])]}
    samples = parse_token_choices(out, 2, 2, "call", _ctx)
    assert [[s.token_ids for s in p] for p in samples] == [[[1, 2], [5]], [[7], [9]]]
    assert samples[0][0].finish_reason == "length" and samples[1][1].finish_reason == "stop"
    assert samples[0][0].logprobs == [-0.5, -0.5] and samples[1][1].text == "t3"


@pytest.mark.parametrize("choices, match", [
    ([_choice(0, [1])], r"^call: asked for 2 samples \(1 prompts x n=2\), server returned 1\n\[log tail\]$"),
    ([_choice(0, [1]), _choice(0, [2])], r"^call: bad or duplicate choice index 0\n\[log tail\]$"),
    ([_choice(0, [1]), _choice(5, [2])], r"bad or duplicate choice index 5"),
    ([_choice(0, [1]), {**_choice(1, [2]), "logprobs": {"tokens": ["x"], "token_logprobs": [0.0]}}],
     r"^call: choice 1 is malformed \(ValueError: call: expected 'token_id:<int>'.*\n\[log tail\]$"),
])
def test_token_choices_that_do_not_add_up_are_refused_with_the_server_log(choices, match):
    with pytest.raises(ServerResponseError, match=match):
        parse_token_choices({"choices": choices}, 1, 2, "call", _ctx)
    with pytest.raises(ServerResponseError, match="response has no 'choices' list"):
        parse_token_choices({"error": "x"}, 1, 2, "call", _ctx)


def test_prompt_logprobs_skip_the_first_token_and_follow_the_index():
    chunk = [[5, 6, 7], [8, 9]]
    assert prompt_logprobs_body("m", chunk)["prompt_logprobs"] == 1
    plp = {"index": 0, "prompt_logprobs": [None, {"6": {"logprob": -1.0}}, {"7": {"logprob": -2.0}}]}
    other = {"index": 1, "prompt_logprobs": [None, {"9": {"logprob": -3.0}}]}
    assert parse_prompt_logprobs({"choices": [other, plp]}, chunk, "lp", _ctx) == [[-1.0, -2.0], [-3.0]]
    with pytest.raises(ServerResponseError, match=r"^lp: sequence 1 has malformed prompt_logprobs \(ValueError: 1 "):
        parse_prompt_logprobs({"choices": [plp, {**other, "prompt_logprobs": [None]}]}, chunk, "lp", _ctx)
    with pytest.raises(ServerResponseError, match=r"^lp: expected 2 choices, got 1\n\[log tail\]$"):
        parse_prompt_logprobs({"choices": [plp]}, chunk, "lp", _ctx)


def test_text_calls_use_each_servers_own_sampling_fields_and_derived_seeds():
    r = GenerationRequest(prompt="p", n=3, max_new_tokens=4, stop=["."], seed=11)
    body = text_completion_body("m", "hello", r, 2, sampling=SAMPLING_FIELDS["llama_cpp"])
    assert body["seed"] == derive_seed(11, 2) and body["n"] == 1 and body["stop"] == ["."]
    assert {k: body[k] for k in SAMPLING_FIELDS["llama_cpp"]} == {"top_k": 0, "min_p": 0.0, "repeat_penalty": 1.0}
    assert "return_tokens_as_token_ids" not in body and "repetition_penalty" not in body
    assert text_completion_body("m", "x", GenerationRequest(prompt="p", seed=11), 0, sampling={})["seed"] == 11
    sample = parse_text_choice({"choices": [{"text": "ok", "finish_reason": "length"}]}, "t", _ctx)
    assert (sample.text, sample.token_ids, sample.finish_reason) == ("ok", [], "length")
    with pytest.raises(ServerResponseError, match=r"^t: the choice has no text"):
        parse_text_choice({"choices": [{"text": None}]}, "t", _ctx)
