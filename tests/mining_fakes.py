"""Test doubles shared by the pair-mining tests (tests/recipes/test_mine_pairs.py, tests/trainer/data/test_knowledge_aware.py)."""

from selectrust.generation.backends.base import GenerationBackend, GenerationResult, Sample


class TableBackend(GenerationBackend):
    """Answers by looking the prompt up in a table (first key that is a substring of the prompt's text). A list
    value gives sample j its j-th entry (for n > 1); ``asked`` records ``(text, n, temperature)`` per request."""

    def __init__(self, table):
        self.table, self.asked = table, []

    def generate(self, requests, *, progress=False, desc=""):
        out = []
        for r in requests:
            text = r.messages[-1]["content"] if r.messages else r.prompt
            self.asked.append((text, r.n, r.temperature))
            answer = next(v for k, v in self.table.items() if k in text)
            answers = answer if isinstance(answer, list) else [answer] * r.n
            out.append(GenerationResult(r, [Sample(answers[j], [], [], "stop") for j in range(r.n)]))
        return out

    def score_labels(self, prompts, labels):
        raise NotImplementedError


def rows_for(i, gold, wrong):
    """The four MIST rows of item ``i``: prompts ``Q<i> clean``, ``Q<i> hint <wrong|gold>``, ``Q<i> sky``."""
    prompts = {"clean": f"Q{i} clean", "misleading": f"Q{i} hint {wrong}", "correct": f"Q{i} hint {gold}",
               "irrelevant": f"Q{i} sky"}
    return [{"row_id": f"{i}-{c}", "item_id": f"i{i}", "condition": c, "prompt": p, "answer_type": "numeric",
             "gold": str(gold), "wrong_value": str(wrong)} for c, p in prompts.items()]
