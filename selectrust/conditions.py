"""The vocabulary of conditions and training pools, defined once.

Every module that builds, reads, mines, trains on or reports rows of a family imports the names of its
conditions from here: the condition names of each evaluation family (and which family they belong to),
SCOPE's training pools, and the pools' sampling mass with its default parameters. It sits in the
foundation because both the trainers and the evaluation use it; it imports nothing.

A name's prefix says which family it belongs to: ``MIST_`` (and the single MIST names, SCOPE's pools), ``BOX2_``,
``TASTE_`` and ``MED_`` are the vocabularies of the families registered as ``mist``, ``box2``, ``taste`` and ``med``
(``eval_hooks/families/<family>/``, which import them from here). A row's ``condition`` is one of its family's names;
a Box2 row's is a regime, or ``partial_<k>`` / ``mixed_<k>`` at step k; a Med row's is ``<category>/<variant>``.

``tests/selectrust/test_vocab.py`` checks that no other product module spells a vocabulary out again, and that
SCOPE's pool names are string literals only here and in the MIST family's own package.
"""

# -- MIST / SCOPE (docs/scope.md) ------------------------------------------------------------------------
CLEAN = "clean"
MISLEADING = "misleading"
CORRECT = "correct"
IRRELEVANT = "irrelevant"
#: The contexts every MIST question is asked under (a quartet), in reporting order.
MIST_CONDITIONS = (CLEAN, MISLEADING, CORRECT, IRRELEVANT)
#: The contexts that push toward a wrong answer; the others should leave a known answer as it is.
ADVERSARIAL_CONDITIONS = (MISLEADING,)
BENIGN_CONDITIONS = tuple(c for c in MIST_CONDITIONS if c not in ADVERSARIAL_CONDITIONS)
#: The two rows pair mining answers (docs/scope.md#pair-mining): r+ from the clean one, r- from the misleading one.
MINED_CONDITIONS = (CLEAN, MISLEADING)

# -- Box2 (docs/box2.md): workflow regimes, the fixed ones, then the two swept over a change point --------
BOX2_FIXED_REGIMES = ("none", "good", "bad")
BOX2_CURVE_REGIMES = ("partial", "mixed")
BOX2_REGIMES = (*BOX2_FIXED_REGIMES, *BOX2_CURVE_REGIMES)

# -- Taste-Bench (docs/taste.md): the two orders of a fork's candidates -----------------------------------
SEEDED = "seeded"
REVERSED = "reversed"
TASTE_CONDITIONS = (SEEDED, REVERSED)

# -- MedCounterfact (docs/medcounterfact.md) ---------------------------------------------------------------
#: Substitution categories: each has a term list in ``eval_hooks/families/med/term_lists/<category>.txt``;
#: ``original`` keeps the real intervention. A row's condition is ``<category>/<variant>``.
MED_SUBSTITUTED = ("nonce", "medical", "non_medical", "toxic")
MED_CATEGORIES = ("original", *MED_SUBSTITUTED)
#: The four prompt variants every MedCounterfact item expands to.
MED_VARIANTS = ("no_evd", "evd", "skept_evd", "expert_evd")
#: Mitigation pipelines besides ``base``, and answer formats, of the MedCounterfact evaluation.
MED_MITIGATIONS = ("detect", "prior")
MED_PIPELINES = ("base", *MED_MITIGATIONS)
MED_FORMATS = ("mc", "free")


# -- SCOPE's training pools (docs/scope.md#condition-weights, #knowledge-aware-scope) ------------------------
UNKNOWN_CORRECT = "unknown_correct"
UNKNOWN_IRRELEVANT = "unknown_irrelevant"
#: Knowledge-aware SCOPE's pools of items the model does not know, each tied to the context condition its
#: prompts are shown under; rows of these pools form no quartet.
UNKNOWN_POOLS = {UNKNOWN_CORRECT: CORRECT, UNKNOWN_IRRELEVANT: IRRELEVANT}
#: Every pool a pair row may belong to: one per MIST condition (a quartet's rows), then the unknown pools.
SCOPE_POOLS = (*MIST_CONDITIONS, *UNKNOWN_POOLS)

#: The parameters of the pools' sampling mass and their defaults (the paper's headline weights): the fields
#: of ``trainer.config.schemas.DPOAlgoConfig`` with these names default to them.
SCOPE_MASS_DEFAULTS = {"lambda_m": 0.25, "lambda_c": 0.25, "lambda_p": 0.50, "rho": 0.50, "lambda_u": 0.0}
#: The parameters that split the quartet pools' mass among themselves: each in [0, 1], together 1.
SCOPE_LAMBDAS = ("lambda_m", "lambda_c", "lambda_p")


def condition_mass(*, lambda_m: float, lambda_c: float, lambda_p: float, rho: float) -> dict[str, float]:
    """docs/scope.md#condition-weights: λ_m, λ_c, λ_p ρ, λ_p (1-ρ) over misleading, clean, correct, irrelevant."""
    return {MISLEADING: lambda_m, CLEAN: lambda_c, CORRECT: lambda_p * rho, IRRELEVANT: lambda_p * (1 - rho)}


def pool_mass(*, lambda_m: float, lambda_c: float, lambda_p: float, rho: float, lambda_u: float = 0.0,
              unknown_irrelevant: bool = False) -> dict[str, float]:
    """docs/scope.md#knowledge-aware-scope: the four SCOPE pools get ``(1 - λ_u)`` times their
    :func:`condition_mass`; the unknown pools get ``λ_u`` (split ``ρ`` / ``1 - ρ`` between unknown_correct
    and unknown_irrelevant when ``unknown_irrelevant``, else all to unknown_correct). λ_u = 0 is SCOPE."""
    mass = {c: (1 - lambda_u) * m for c, m in condition_mass(lambda_m=lambda_m, lambda_c=lambda_c,
                                                              lambda_p=lambda_p, rho=rho).items()}
    if lambda_u > 0:
        share = rho if unknown_irrelevant else 1.0
        mass[UNKNOWN_CORRECT] = lambda_u * share
        if unknown_irrelevant:
            mass[UNKNOWN_IRRELEVANT] = lambda_u * (1 - share)
    return mass


#: Each pool's sampling mass under the default parameters.
SCOPE_DEFAULT_MASS = pool_mass(**SCOPE_MASS_DEFAULTS)


def check_contexts(contexts, where: str) -> None:
    """A MIST builder's contexts (``{condition: ...}``) must name every condition of :data:`MIST_CONDITIONS`: a
    condition added to the vocabulary but not to the builder ``where`` is a ValueError naming both, not a KeyError
    (or a missing row) later."""
    missing = [c for c in MIST_CONDITIONS if c not in contexts]
    if missing:
        raise ValueError(f"{where} gives no context for the MIST condition(s) {missing}: add each to its contexts "
                         "(docs/architecture.md#how-to-add, a new condition)")
