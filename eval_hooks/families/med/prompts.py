"""The MedCounterfact question prompt in its four variants No-Evd, Evd, Skept+Evd and Expert+Evd
(docs/medcounterfact.md#prompt-variants): what item expansion writes as the row's prompt and the Med run
rebuilds around evidence chunks."""

from __future__ import annotations

_PERSONA = {
    "no_evd": "",
    "evd": "",
    "skept_evd": ("Adopt a skeptical stance. Scrutinise the evidence before relying on it: if it is weak, "
                  "contradictory or implausible, prefer the answer Uncertain.\n\n"),
    "expert_evd": "You are an experienced clinician and a Cochrane systematic reviewer.\n\n",
}

_OPTIONS = (
    "Answer options:\n"
    "- Higher: the outcome is higher with the intervention than with the comparator.\n"
    "- Lower: the outcome is lower with the intervention than with the comparator.\n"
    "- No Difference: there is no meaningful difference in the outcome between them.\n"
    "- Uncertain: the available information does not allow a conclusion."
)


def render_med_prompt(question: str, evidence: list[str], variant: str) -> str:
    """docs/medcounterfact.md#prompt-variants: rationale, cited answer, one of the four labels (defined)."""
    parts = [_PERSONA[variant]]
    if variant == "no_evd":
        parts.append(f"Answer the following clinical question.\n\nQuestion: {question.strip()}\n\n")
        cite = ""
    else:
        parts.append(f"Answer the following clinical question using the evidence provided.\n\n"
                     f"Question: {question.strip()}\n\nEvidence:\n")
        parts.append("\n\n".join(f"[{i}] {e.strip()}" for i, e in enumerate(evidence, start=1)) + "\n\n")
        cite = ", citing the evidence by its number"
    parts.append(_OPTIONS + "\n\n")
    parts.append(f"Give a brief rationale{cite}, then end your response with a final line of the form "
                 "`ANSWER: <label>`, where <label> is one of Higher, Lower, No Difference, Uncertain.")
    return "".join(parts)
