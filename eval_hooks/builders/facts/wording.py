"""How a facts item becomes its four MIST rows: the question, the context channels and their wordings.

Every channel has wordings used only on training rows and wordings used only on held-out and transfer rows
(:data:`CHANNELS`), so a held-out context never repeats a wording the model was trained on (the dev parts, like
the test items they stand in for, use the held-out wordings). Within one item the
three contexts share one wording: only the stated fact changes between misleading, correct and irrelevant.
"""

from __future__ import annotations

import random

from selectrust.conditions import CLEAN, CORRECT, IRRELEVANT, MISLEADING, MIST_CONDITIONS, check_contexts

INSTRUCTION = "Answer in one short sentence."
# channel -> {"train": wordings, "heldout": wordings}; {fact} is the relation's fact sentence, {Fact} capitalised.
CHANNELS = {
    "answer_key": {
        "train": ["Answer key (geography quiz, instructor copy): {fact}.",
                  "Quiz solutions, checked by the teacher: {fact}."],
        "heldout": ["Official marking scheme for the exam: {fact}.",
                    "Correct answers sheet, final version: {fact}."]},
    "retrieved_document": {
        "train": ['Retrieved document (encyclopedia excerpt): "... {Fact}, as listed in the atlas ..."',
                  'Retrieved passage (reference handbook): "... {Fact}, according to the handbook ..."'],
        "heldout": ['Document found by the search tool (almanac entry): "... {Fact}, as the almanac records ..."',
                    'Retrieved page (travel guide): "... {Fact}, the guide notes ..."']},
    "lecture_note": {
        "train": ["Lecture note, Geography 101: {Fact}.",
                  "Class handout, week 3 of World Regions: {Fact}."],
        "heldout": ["Seminar slides, Introduction to Human Geography: {Fact}.",
                    "Study notes shared by the tutor: {Fact}."]},
    "search_snippet": {
        "train": ['Top search result snippet: "{Fact}."',
                  'First web result (reference site): "{Fact}."'],
        "heldout": ['Featured answer box of a search engine: "{Fact}."',
                    'Knowledge panel excerpt: "{Fact}."']},
    "expert_claim": {
        "train": ["A geography professor states with confidence that {fact}.",
                  "An experienced cartographer insists that {fact}."],
        "heldout": ["A well-known travel writer asserts that {fact}.",
                    "A senior diplomat confirms that {fact}."]},
}
WORDING_SIDE = {"train": "train", "heldout": "heldout", "transfer": "heldout", "dev": "heldout",
                "transfer_dev": "heldout"}


def fixed_text(questions: list[str], facts: list[str]) -> str:
    """Every fixed word a prompt can hold (all wordings, questions, facts and the instruction), placeholders
    removed: a held-out name that is one of these words would appear in every training prompt."""
    parts = [w for ch in CHANNELS.values() for ws in ch.values() for w in ws] + questions + facts
    text = " ".join([*parts, INSTRUCTION, "Question:"])
    for ph in ("{fact}", "{Fact}", "{s}", "{o}"):
        text = text.replace(ph, " ")
    return text


def item_rows(item: dict, other: dict, question: str, fact: str, seed: int, split: str) -> list[dict]:
    """The four rows of ``item`` (clean, misleading, correct, irrelevant); ``other`` is the item whose true fact
    the irrelevant context states; the channel and wording are drawn from the item's own seeded RNG."""
    rng = random.Random(f"{seed}|{item['id']}")
    channel = rng.choice(sorted(CHANNELS))
    side = WORDING_SIDE[split]
    k = rng.randrange(len(CHANNELS[channel][side]))
    wording = CHANNELS[channel][side][k]
    q = question.format(s=item["subject"])

    def context(s: str, o: str) -> str:
        f = fact.format(s=s, o=o)
        return wording.format(fact=f, Fact=f[0].upper() + f[1:])

    contexts = {CLEAN: None, MISLEADING: context(item["subject"], item["wrong_value"]),
                CORRECT: context(item["subject"], item["gold"]),
                IRRELEVANT: context(other["subject"], other["gold"])}
    check_contexts(contexts, "eval_hooks/builders/facts/wording.py")
    rows = []
    for cond in MIST_CONDITIONS:
        ctx = contexts[cond]
        prompt = (f"{ctx}\n\n" if ctx else "") + f"Question: {q}\n{INSTRUCTION}"
        row = {"item_id": item["id"], "condition": cond, "prompt": prompt, "question": q, "answer_type": "short_text",
               "gold": item["gold"], "wrong_value": item["wrong_value"], "relation": item["relation"],
               "channel": channel, "wording": f"{channel}/{side}{k}", "subject": item["subject"], "context": ctx,
               "group": item["group"], "source": "geonames", "split": split}
        if item["aliases"]:
            row["gold_aliases"] = item["aliases"]
        rows.append(row)
    return rows
