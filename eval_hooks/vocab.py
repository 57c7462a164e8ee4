"""The names each evaluation family uses for its conditions, defined once.

Every module that reads, writes, mines, trains on or reports these rows imports its vocabulary from
here (``eval_hooks`` is below ``trainer``, so both layers can). This module imports nothing.
"""

#: MIST/SCOPE contexts of one question (docs/scope.md), in reporting order.
MIST_CONDITIONS = ("clean", "misleading", "correct", "irrelevant")

#: Box2 workflow regimes (docs/box2.md): the fixed ones, then the two swept over a change point.
BOX2_FIXED_REGIMES = ("none", "good", "bad")
BOX2_CURVE_REGIMES = ("partial", "mixed")
BOX2_REGIMES = (*BOX2_FIXED_REGIMES, *BOX2_CURVE_REGIMES)

#: Taste-Bench fork conditions (docs/taste.md).
TASTE_CONDITIONS = ("seeded", "reversed")

#: MedCounterfact substitution categories (docs/medcounterfact.md): each has a term list in
#: ``eval_hooks/builders/med_term_lists/<category>.txt``; ``original`` keeps the real intervention.
MED_SUBSTITUTED = ("nonce", "medical", "non_medical", "toxic")
MED_CATEGORIES = ("original", *MED_SUBSTITUTED)
#: The four prompt variants every MedCounterfact item expands to.
MED_VARIANTS = ("no_evd", "evd", "skept_evd", "expert_evd")
#: Mitigation pipelines besides ``base``, and answer formats, of the MedCounterfact evaluation.
MED_MITIGATIONS = ("detect", "prior")
MED_PIPELINES = ("base", *MED_MITIGATIONS)
MED_FORMATS = ("mc", "free")
