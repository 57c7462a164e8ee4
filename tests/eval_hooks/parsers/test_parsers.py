"""Answer parsers: formats each type must read, the last-answer-wins rule, and no crash on any input."""

import pytest
from hypothesis import example, HealthCheck, given, settings
from hypothesis import strategies as st

from eval_hooks.parsers import (answers_match, final_answer_spans, normalize_gold, parse_answer, parse_boolean,
                                parse_fork_answer, parse_label, parse_multiple_choice, parse_number,
                                parse_numeric)
from eval_hooks import parsers as parsers_module
from eval_hooks.parsers import FORK_LETTERS


@pytest.mark.parametrize("text, expected", [
    ("She makes 9 * 2 = $18 every day.", "18"),                 # no marker: last number
    ("The answer is 18.", "18"),                                 # sentence period is not a decimal point
    ("The answer is $1,000.", "1000"),                           # currency + thousands separator
    ("#### 70000", "70000"),
    ("step...\n#### 1,234,567", "1234567"),
    ("Final answer: -5 degrees", "-5"),                          # sign + trailing unit
    ("ANSWER: 18.0", "18"),                                      # canonical integer
    ("ANSWER: 0.50", "0.5"),
    ("ANSWER: 3/4 cup", "0.75"),                                 # fraction, exact decimal
    ("ANSWER: 1/3", "1/3"),                                      # non-terminating stays a fraction
    (r"so $\boxed{\frac{1}{2}}$", "0.5"),
    (r"\boxed{\dfrac{-3}{4}}", "-0.75"),
    (r"\boxed{18\text{ dollars}}", "18"),
    (r"\boxed{1{,}000}", "1000"),
    ("The answer is 25%.", "25%"),
    ("The answer is 25 percent", "25%"),
    ("Answer: 12 km/h", "12"),                                   # unit with a slash is not a fraction
    ("**Answer:** 42", "42"),                                    # Markdown bold around the marker
    ("The answer is\n\n42 apples", "42"),                        # value on the next line
    ("The answer is 5 - 3 = 2", "5"),                            # first number after the marker
    ("Range 5-10 items", "10"),                                  # hyphen between numbers is not a sign
    ("ANSWER: 7\n...on reflection...\nANSWER: 9", "9"),         # the last final answer wins
    (r"\boxed{4} but then the answer is 5", "5"),
    ("The answer is 7. Some 8 9 numbers after.", "7"),          # a marker beats later bare numbers
    ("answer: none found, but x = 3", "3"),                     # marker without a number: fall back
    ("no numbers at all", None),
    ("", None),
])
def test_parse_numeric(text, expected):
    assert parse_numeric(text) == expected


@pytest.mark.parametrize("parsed, gold, ok", [
    ("18", "18.0", True), ("1000", "1,000", True), ("18", 18, True), ("0.5", "1/2", True),
    ("25%", "25", True), ("25%", "0.25", True), ("25", "0.25", False), ("17", "18", False),
    ("0.3333333", "1/3", True),  # within the 1e-6 relative tolerance
    ("0.33", "1/3", False), (None, "18", False), ("-5", "5", False),
])
def test_numeric_equality(parsed, gold, ok):
    assert answers_match(parsed, gold, "numeric") is ok


@pytest.mark.parametrize("text, choices, expected", [
    ("ANSWER: B", None, "B"),
    ("The answer is (C).", None, "C"),
    ("The correct option is D", ["a", "b", "c", "d"], "D"),
    ("Answer: Mars", ["Venus", "Mars", "Jupiter"], "B"),           # option text
    ("Answer: mars.", {"A": "Venus", "B": "Mars"}, "B"),
    ("B", None, "B"),                                               # bare letter response
    ("reasoning...\n(A) Venus", ["Venus", "Mars"], "A"),            # last line "(A) ..."
    ("ANSWER: A ... wait. ANSWER: C", None, "C"),
    ("Answer: E", ["w", "x", "y", "z"], None),                     # letter outside the choices
    ("I have no idea", ["Venus", "Mars"], None),
    ("answer: b", None, "B"),                                       # a lone lowercase letter
])
def test_parse_multiple_choice(text, choices, expected):
    assert parse_multiple_choice(text, choices) == expected


def test_choice_gold_by_text_and_letter():
    ch = ["Venus", "Mars"]
    assert normalize_gold("Mars", "multiple_choice", choices=ch) == "B"
    assert normalize_gold("b", "multiple_choice", choices=ch) == "B"
    assert normalize_gold("C", "multiple_choice", choices=ch) is None
    assert answers_match("B", "Mars", "multiple_choice", choices=ch)


@pytest.mark.parametrize("text, expected", [
    ("Yes, 91 = 7 x 13.", "true"), ("ANSWER: no", "false"), ("Answer: True", "true"),
    ("Let me think.\nSo the statement is false.", "false"), ("ANSWER: yes\nANSWER: no", "false"),
    ("Not sure at all", None), ("nothing", None),
])
def test_parse_boolean(text, expected):
    assert parse_boolean(text) == expected


def test_boolean_gold_forms():
    assert [normalize_gold(g, "boolean") for g in (True, False, "Yes", "no", "TRUE", "maybe")] == \
        ["true", "false", "true", "false", "true", None]


@pytest.mark.parametrize("text, expected", [  # the published runner's rule: bare letter or final ANSWER line
    ("I prefer the second.\nANSWER: B", "B"), ("  b \n", "B"), ("A", "A"), ("answer: a", "A"),
    ("Reasoning...\nANSWER:B  \n\n", "B"), ("ANSWER: A\n...\nANSWER: B", "B"),
    ("ANSWER: A\nbecause of the tests", None),   # something after the ANSWER line
    ("**ANSWER: B**", None), ("Answer: Candidate (A)", None), ("ANSWER: [B]", None), ("ANSWER: C", None),
    ("C", None), ("ANSWER: Both", None), ("answer: a reasonable choice", None),
    ("B is better", None), ("", None),
])
def test_parse_fork_answer(text, expected):
    assert parse_fork_answer(text, FORK_LETTERS) == expected


@pytest.mark.parametrize("text, expected", [
    ("The trial shows higher rates...\nANSWER: No Difference", "No Difference"),
    ("ANSWER: lower", "Lower"), ("Answer: **Uncertain**", "Uncertain"), ("Higher", "Higher"),
    ("Final answer: no significant difference", "No Difference"),
    ("ANSWER: Higher\nANSWER: Uncertain", "Uncertain"),
    ("The evidence is mixed.\nIt could be higher or lower.", None),   # last line names two labels
    ("Rationale only, no label", None),
])
def test_parse_label(text, expected):
    assert parse_label(text) == expected


def test_dispatch_rejects_unknown_type():
    with pytest.raises(ValueError, match="accepted"):
        parse_answer("1", "essay")


@pytest.mark.parametrize("call", [
    lambda: parse_answer("1", "essay"), lambda: normalize_gold("1", "essay"), lambda: answers_match("1", "1", "essay"),
    lambda: parsers_module.answer_type(["numeric"]),
])
def test_an_unknown_answer_type_is_a_data_error_naming_the_known_ones(call):
    from selectrust.core.errors import DataError

    with pytest.raises(DataError, match=r"unknown answer_type .*; accepted: multiple_choice, numeric, boolean, choice, "
                                        r"label, short_text"):
        call()


def test_the_registry_takes_only_answer_types_named_as_registered():
    """A built-in line or entry point must name an AnswerType of that name; register_answer_type takes only one."""
    from eval_hooks import parsers
    from selectrust.core.errors import DataError

    with pytest.raises(DataError, match="not an AnswerType named 'colour'"):
        parsers._accept("colour", parsers.answer_type("numeric"))
    with pytest.raises(TypeError, match="needs an AnswerType"):
        parsers.register_answer_type(parse_numeric)
    with pytest.raises(ValueError, match="already registered"):
        parsers.register_answer_type(parsers.answer_type("numeric"))


def test_the_fork_and_label_types_read_their_families_letters_and_labels():
    """The fork (``choice``, Taste) and ``label`` (Med) types are built in, with the letters and labels the families
    import from the parsers (eval_hooks/parsers/choice.py, below the families)."""
    from eval_hooks.families.med.pipelines import MED_LABELS as MED_PIPELINE_LABELS
    from eval_hooks.parsers import MED_LABELS
    from eval_hooks.parsers import answer_type

    assert parsers_module.BUILTIN["choice"] is answer_type("choice") and parsers_module.BUILTIN["label"] is \
        answer_type("label")
    assert MED_PIPELINE_LABELS is MED_LABELS

    assert [normalize_gold(lab.upper(), "label") for lab in MED_LABELS] == list(MED_LABELS)
    assert normalize_gold("Maybe", "label") is None
    assert [normalize_gold(f" {x.lower()} ", "choice") for x in FORK_LETTERS] == list(FORK_LETTERS)
    assert normalize_gold("C", "choice") is None and parse_answer("ANSWER: C", "choice") is None
    assert parse_answer("thinking...\nANSWER: b", "choice") == "B"
    assert answer_type("label").accepted == "Higher | Lower | No Difference"


def test_same_answer_is_the_types_own():
    """Numbers are one answer within the numeric matcher's tolerance (as written when too long to parse back);
    another type's canonical values are one answer only when equal."""
    from eval_hooks.parsers import answer_type

    numeric = answer_type("numeric")
    assert numeric.same_answer("18", "18.0000001") and not numeric.same_answer("18", "19")
    assert numeric.same_answer("25%", "0.25") and numeric.same_answer("1E100", "1E100")
    short = answer_type("short_text")
    assert short.same_answer("paris", "paris") and not short.same_answer("paris", "lyon")
    assert not answer_type("boolean").same_answer("true", "false")


def test_parse_number_needs_exactly_one_number():
    assert parse_number("1,000").canonical() == "1000"
    assert parse_number("3 or 4") is None
    assert parse_number(True) is None and parse_number(float("nan")) is None


def test_huge_and_pathological_inputs_are_fast_and_safe():
    assert parse_numeric("9" * 10000) is None                    # beyond int() digit limits: not an answer
    assert parse_numeric("answer:" + " " * 50000 + "x") is None  # no quadratic backtracking
    assert parse_fork_answer("answer:" + " " * 50000 + "C", FORK_LETTERS) is None
    assert final_answer_spans(r"\boxed{" * 3000) != []


_alphabet = st.sampled_from(list("0123456789.,/%$-+ \n{}()[]*#:ABCDabxyz") +
                            ["answer", "ANSWER:", "The answer is", "\\boxed{", "\\frac{", "####", "yes", "no",
                             "Higher", "No Difference", "percent", "−", "1,000", "\u2009"])
_texts = st.one_of(st.text(max_size=300), st.lists(_alphabet, max_size=60).map("".join))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_texts, st.sampled_from(["numeric", "multiple_choice", "boolean", "choice", "label"]),
       st.sampled_from([None, ["x", "y", "z"], {"A": "p", "B": "q"}]))
@example(text="1E100", answer_type="numeric", choices=None)  # a canonical form longer than MAX_DIGITS matches itself
def test_no_input_crashes_a_parser(text, answer_type, choices):
    out = parse_answer(text, answer_type, choices=choices)
    assert out is None or isinstance(out, str)
    # whatever is parsed must compare without error, and equal itself as a gold
    if out is not None:
        assert answers_match(out, out, answer_type, choices=choices) or answer_type == "multiple_choice"


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=-10**12, max_value=10**12), st.text(max_size=40))
def test_numeric_roundtrip_with_marker(n, noise):
    """A formatted integer after a final marker parses back to itself whatever text precedes it."""
    text = f"{noise}\nThe answer is {n:,}."
    assert answers_match(parse_numeric(text), n, "numeric")


# -- realistic response endings (GSM8K- and MATH-style): parsed value and verdict against a gold ----------
# (response ending, gold, parsed canonical value, parsed == gold?)
ENDINGS = [
    # plain GSM8K endings
    ("So she earns 16 - 3 - 4 = 9 eggs * $2 = $18 per day.\n#### 18", "18", "18", True),
    ("Total = 5 + 7 = 12 apples.\n#### 12", "13", "12", False),
    ("Therefore, the answer is 1,250.", "1250", "1250", True),
    ("He pays $4.50 in total.\nThe answer is $4.50.", "4.5", "4.5", True),
    ("The final answer is −7.", "-7", "-7", True),                                 # Unicode minus
    ("The temperature drops to −12 degrees.\n#### −12", "-12", "-12", True),
    ("Answer: 0.25", "1/4", "0.25", True),
    # fractions
    ("Each friend gets 3/4 of a pizza. The answer is 3/4.", "0.75", "0.75", True),
    ("The answer is 3/4.", "3", "0.75", False),                                  # the old bug read this as 3
    ("So the slope is -3/4.", "-0.75", "-0.75", True),
    ("The probability is 2/3.", "2/3", "2/3", True),
    ("The probability is 2/3.", "0.67", "2/3", False),
    ("Simplifying, the ratio is 10/4 = 5/2.\nFinal answer: 5/2", "2.5", "2.5", True),
    ("She drinks 1/8 of the bottle.\n#### 1/8", "0.125", "0.125", True),
    ("Thus the answer is \u22123/4.", "-3/4", "-0.75", True),                    # Unicode minus on a fraction
    # LaTeX fractions (MATH)
    (r"Therefore, $x = \boxed{\frac{3}{4}}$.", "3/4", "0.75", True),
    (r"The final answer is $\boxed{\dfrac{1}{6}}$.", "1/6", "1/6", True),
    (r"So the answer is $\boxed{\dfrac34}$.", "0.75", "0.75", True),
    (r"Hence $\boxed{-\frac{5}{2}}$.", "-2.5", "-2.5", True),
    (r"We get $\boxed{\tfrac{7}{8}}$.", "7/8", "0.875", True),
    (r"so the answer is $\frac{9}{4}$.", "2.25", "2.25", True),
    (r"The value is $\boxed{\frac{-1}{3}}$", "-1/3", "-1/3", True),
    (r"$\boxed{\frac{1}{3}}$", "0.333", "1/3", False),
    # mixed numbers
    ("She needs 1 1/2 cups of flour.\n#### 1 1/2", "1.5", "1.5", True),
    ("The answer is 2 3/4 hours.", "11/4", "2.75", True),
    ("The recipe makes 3 1/3 batches. The answer is 3 1/3", "10/3", "10/3", True),
    (r"So the answer is $\boxed{1\frac{1}{2}}$.", "3/2", "1.5", True),
    ("The board is 5 1/4 feet long.\nAnswer: 5 1/4", "5", "5.25", False),
    ("The answer is -1 1/2.", "-1.5", "-1.5", True),
    # percents
    ("So the discount is 40%.\n#### 40%", "40", "40%", True),
    ("The answer is 40%.", "0.4", "40%", True),
    ("The tax rate is 7.5%. The answer is 7.5%", "7.5", "7.5%", True),
    (r"The final answer is $\boxed{25\%}$.", "25", "25%", True),
    ("The answer is 40 percent.", "60", "40%", False),
    # scientific notation
    ("The population is 1.2e4.\nThe answer is 1.2e4", "12000", "12000", True),
    ("That is about 3.0E-3 meters.\n#### 3.0E-3", "0.003", "0.003", True),
    (r"The answer is $\boxed{1.2 \times 10^{4}}$.", "12000", "12000", True),
    ("The answer is 6.02e23.", "6.02e23", "602000000000000000000000", True),
    ("The answer is 5e2.", "50", "500", False),
    # last answer wins, markers beat bare numbers
    ("The answer is 3/4.\nWait, I made an error. The answer is 1/2.", "1/2", "0.5", True),
    (r"First guess \boxed{2}. Correcting: \boxed{\frac{5}{3}}", "5/3", "5/3", True),
    ("#### 3/4\n(3 of 4 slices)", "0.75", "0.75", True),
    # no answer at all
    ("I cannot determine the answer.", "4", None, False),
]


@pytest.mark.parametrize("text, gold, parsed, ok", ENDINGS)
def test_realistic_numeric_endings(text, gold, parsed, ok):
    got = parse_answer(text, "numeric")
    assert got == parsed
    assert answers_match(got, gold, "numeric") is ok


def test_endings_table_size():
    assert len(ENDINGS) >= 40


# -- short_text ---------------------------------------------------------------------------------------

SHORT_TEXT_DATA = __import__("pathlib").Path(__file__).parents[2] / "data" / "smollm2_short_text_outputs.jsonl"


def _short_rows():
    import json

    return [json.loads(line) for line in SHORT_TEXT_DATA.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_short_text_table_of_real_smollm2_outputs_matches_the_hand_verdicts():
    """96 real SmolLM2-135M-Instruct responses (greedy, ChatML with its default system prompt; capitals and city
    countries under clean / misleading / correct / irrelevant contexts), each judged by hand."""
    from eval_hooks.parsers import answer_status, parse_row_answer, row_answer_matches

    rows = _short_rows()
    assert len(rows) >= 40
    assert {r["verdict"] for r in rows} == {"correct", "wrong"} and {r["status"] for r in rows} == {"candidate", "outside"}
    for r in rows:
        row = dict(r, answer_type="short_text")
        parsed = parse_row_answer(r["response"], row)
        verdict = "correct" if row_answer_matches(parsed, row) else "wrong"
        assert (verdict, answer_status(parsed, row)) == (r["verdict"], r["status"]), (r["id"], r["response"], parsed)


@pytest.mark.parametrize("text, candidates, parsed", [
    ("Sofia", ["Sofia", "Plovdiv"], "sofia"),
    ("The capital of Bulgaria is SOFIA!", ["Sofia", "Plovdiv"], "sofia"),
    ("The answer is: **Bogotá**", ["Bogota", "Medellin"], "bogota"),  # diacritics either side
    ("Bogota.", ["Bogotá", "Medellín"], "bogota"),
    ("The Hague.", ["Hague", "Rotterdam"], "hague"),  # a leading article
    ("Equatorial Guinea", ["Equatorial Guinea", "Guinea"], "equatorial guinea"),  # the longer candidate wins
    # A known limit: a candidate inside a longer name that is not a candidate still counts (the facts builder
    # drops such items: name_inside_another_name).
    ("Equatorial Guinea", ["Guinea", "Gabon"], "guinea"),
    ("Mumbai, India, is a city in Bangladesh.", ["India", "Bangladesh"], "bangladesh"),  # the copula's complement
    ("I don't know.", ["Sofia", "Plovdiv"], None),
    ("", ["Sofia"], None),
    ("...", ["Sofia"], None),
    ("The capital of Bulgaria is Varna. Sofia is its largest city.", ["Sofia", "Plovdiv"], "varna"),  # first sentence
    ("Answer: Plovdiv", ["Sofia", "Plovdiv"], "plovdiv"),
])
def test_short_text_rule(text, candidates, parsed):
    assert parse_answer(text, "short_text", candidates=candidates) == parsed


def test_short_text_gold_aliases_and_normalisation():
    from eval_hooks.parsers import normalize_short_text

    assert normalize_short_text("Côte d'Ivoire") == "cote d ivoire" == normalize_short_text("Cote d’Ivoire")
    assert normalize_short_text("The Gambia") == "gambia" and normalize_short_text("A") == "a"
    assert answers_match("kiev", "Kyiv", "short_text", aliases=["Kiev"])
    assert not answers_match("kiev", "Kyiv", "short_text")
    assert not answers_match("kyi", "Kyiv", "short_text")  # never fuzzy
    assert normalize_gold("  ", "short_text") is None and normalize_gold("Lomé", "short_text") == "lome"


@pytest.mark.parametrize("text, parsed", [
    ("A city called Kabul.", None),  # the article, not option A
    ("A capital in the east.", None),
    ("I think so.", None),
    ("A", "A"), ("A is correct.", "A"), ("(A) Kabul", "A"), ("A. Kabul", "A"), ("B city", "B"),
    ("The answer is A.", "A"),
])
def test_multiple_choice_article_is_not_an_option(text, parsed):
    assert parse_answer(text, "multiple_choice", choices=["Herat", "Kandahar", "Mazar", "Jalalabad"]) == parsed


def test_a_new_answer_type_is_one_registry_entry():
    """docs/architecture.md's walk "A new answer type": one :class:`AnswerType` entry (here a colour name) is parsed,
    normalised, compared, given its candidates and status, its budget and its accepted text through the same public
    functions the families and trainers call; nothing else names it."""
    import re

    from eval_hooks import parsers
    from selectrust.core.errors import DataError
    from eval_hooks.families.base import Ctx, check_gold

    colours = ("red", "green", "blue")

    def parse(text, choices, candidates):
        words = [w for w in re.findall(r"[a-z]+", str(text).lower()) if w in colours]
        return words[-1] if words else None

    parsers.register_answer_type(parsers.AnswerType(
        "colour", parse=parse, normalize=lambda v, choices=None: v.strip().lower() if isinstance(v, str)
        and v.strip().lower() in colours else None, accepted="red | green | blue", budget=8))
    try:
        _check_the_colour_type(parsers, DataError, check_gold, Ctx)
    finally:
        parsers.unregister_answer_type("colour")
    assert "colour" not in parsers.ANSWER_TYPES


def _check_the_colour_type(parsers, DataError, check_gold, Ctx):
    import re

    row = {"answer_type": "colour", "gold": "Red", "wrong_value": "Blue"}
    parsed = parsers.parse_row_answer("Green? No: RED.", row)
    assert parsed == "red" and parsers.row_answer_matches(parsed, row)
    assert parsers.answer_status(parsed, row) == "candidate"
    assert parsers.answer_status(parsers.parse_row_answer("green", row), row) == "outside"
    assert parsers.answer_status(parsers.parse_row_answer("grey", row), row) == "no_answer"
    assert parsers.row_answer_matches("blue", row, "wrong_value") and not parsers.answers_match("blue", "red", "colour")
    assert parsers.answer_budget({"colour"}) == 8 and parsers.answer_budget({"colour", "numeric"}) == 512
    with pytest.raises(DataError, match=re.escape("accepted: red | green | blue")):
        check_gold("pink", "colour", Ctx("items.jsonl", 3))
    with pytest.raises(ValueError, match="colour"):  # no instruction declared: a family cannot write its prompt line
        parsers.answer_instruction("colour")
    with pytest.raises(ValueError, match="accepted: .*short_text, open_answer, colour"):
        parse_answer("1", "essay")



# -- short_text: what a response commits to (issue 33) ----------------------------------------------------------------

PARIS, SOFIA = [("Paris",), ("Lyon",)], [("Sofia",), ("Plovdiv",)]


@pytest.mark.parametrize("text, candidates, parsed, status", [
    # hedges: two candidates offered as alternatives commit to neither
    ("Either Paris or Lyon.", PARIS, None, "hedged"),
    ("The capital of Bulgaria is probably Sofia or maybe Plovdiv.", SOFIA, None, "hedged"),
    ("The capital of France is either Lyon or Paris.", PARIS, None, "hedged"),
    # self-corrections commit to the last answer
    ("Lyon. No wait, Paris.", PARIS, "paris", "answer"),
    ("Is it Lyon? No, it is Paris.", PARIS, "paris", "answer"),
    ("Sofia? Plovdiv? The capital of Bulgaria is Plovdiv.", SOFIA, "plovdiv", "answer"),
    # the correct answer named first, the other one negated or set aside
    ("Paris is the capital of France, not Lyon.", PARIS, "paris", "answer"),
    ("Paris is the capital of France, while Lyon is a major city.", PARIS, "paris", "answer"),
    ("Paris is correct; the context claiming Lyon is wrong.", PARIS, "paris", "answer"),
    ("The capital of Bulgaria is not Plovdiv but Sofia.", SOFIA, "sofia", "answer"),
    # punctuation: an abbreviation inside a name, a colon and a line break before the answer
    ("St. Petersburg is a city in Russia.", [("Russia",), ("Ukraine",)], "russia", "answer"),
    ("St. Petersburg is a city in Russia.", [("Moscow",), ("Saint Petersburg",)], "saint petersburg", "answer"),
    ("The capital of France is:\n\nParis.", PARIS, "paris", "answer"),
    # refusal wording is no answer (it was an answer outside the candidates)
    ("As an AI, I won't answer.", PARIS, None, "no_answer"),
])
def test_short_text_reads_the_committed_answer(text, candidates, parsed, status):
    """Each response of issue 33's short_text cases, with what the old reader made of it in the issue: hedges read as
    their first name, self-corrections as the first, the negated name read as the answer, "st" and "capital of
    france is" read as names, a refusal as an outside answer."""
    from eval_hooks.parsers import read_short_text

    assert read_short_text(text, candidates) == (parsed, status)
    assert parse_answer(text, "short_text", candidates=candidates) == parsed


def test_hedged_is_the_status_of_a_row_and_never_correct():
    from eval_hooks.families import get_family
    from eval_hooks.parsers import row_answer_matches

    row = {"row_id": "f/misleading", "item_id": "f", "condition": "misleading", "answer_type": "short_text",
           "gold": "Paris", "wrong_value": "Lyon", "gold_aliases": None}
    out = get_family("mist").score_row(row, "The capital of France is either Lyon or Paris.")
    assert (out["parsed"], out["parse_ok"], out["correct"], out["answer_status"]) == (None, False, False, "hedged")
    assert not row_answer_matches(out["parsed"], row, "wrong_value")  # not counted as following the context
    out = get_family("mist").score_row(row, "I don't know.")
    assert out["answer_status"] == "no_answer"


def test_normalisation_never_changes_a_base_character():
    """パリ became ハリ (its combining handakuten was dropped like an accent); accents on Latin and Greek letters
    still go, and St./Mt./Ft. read as Saint/Mount/Fort."""
    from eval_hooks.parsers import normalize_short_text

    assert normalize_short_text("パリ") == "パリ" != normalize_short_text("ハリ")
    assert normalize_short_text("ﾊﾟﾘ") == "パリ"  # half-width kana: the same name
    assert normalize_short_text("Київ") == "київ" and normalize_short_text("Йошкар-Ола") == "йошкар ола"
    assert normalize_short_text("Bogotá") == "bogota" and normalize_short_text("Αθήνα") == normalize_short_text("Αθηνα")
    assert normalize_short_text("St. Petersburg") == "saint petersburg" == normalize_short_text("Saint-Petersburg")
    assert answers_match("パリ", "パリ", "short_text") and not answers_match("ハリ", "パリ", "short_text")


ADVERSARIAL_DATA = SHORT_TEXT_DATA.parent / "short_text_adversarial.jsonl"


def test_short_text_adversarial_table_verdicts():
    """Responses written for the forms above (hedges, self-corrections, negated or set-aside candidates, abbreviations,
    colons and line breaks, refusals, non-Latin names, and controls that must not change), each with the verdict,
    status and reading a careful human gives; scored through MIST's own ``score_row``."""
    import json

    from eval_hooks.families import get_family

    rows = [json.loads(line) for line in ADVERSARIAL_DATA.read_text(encoding="utf-8").splitlines() if line.strip()]
    assert len(rows) >= 60 and len({r["id"] for r in rows}) == len(rows)
    forms = {r["form"].split("_")[0] for r in rows}
    assert forms >= {"hedge", "self", "negation", "abbreviation", "colon", "refusal", "normalisation", "control"}
    mist = get_family("mist")
    for r in rows:
        row = {"row_id": r["id"], "item_id": r["id"], "condition": "clean", "answer_type": "short_text",
               "gold": r["gold"], "wrong_value": r["wrong_value"], "gold_aliases": r.get("gold_aliases")}
        out = mist.score_row(row, r["response"])
        got = (out["parsed"], "correct" if out["correct"] else "wrong", out["answer_status"])
        assert got == (r["parsed"], r["verdict"], r["status"]), (r["id"], r["response"])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.text(max_size=300), st.lists(st.sampled_from(
    ["Paris", "Lyon", " or ", " not ", "No wait, ", "St.", ":\n", "?", ". ", ", ", " is ", "while ", "isn't ", "パリ",
     "either ", "I mean ", "wrong", "\n"]), max_size=40).map("".join)))
def test_no_input_crashes_the_short_text_reader(text):
    from eval_hooks.parsers import read_short_text

    out = read_short_text(text, [("Paris", "Paname"), ("Lyon",)])
    assert out.status in ("answer", "hedged", "multiple", "no_answer") and (out.answer is None) == (out.status != "answer")


#: An answer type as an installed package would declare it (test_an_installed_packages_answer_type_is_found).
WORD_COUNT = parsers_module.AnswerType(
    "word_count", parse=lambda text, choices, cands: str(len(str(text).split())),
    normalize=lambda value, choices=None: str(value) if str(value).isdigit() else None, accepted="a whole number",
    budget=16)


def test_an_installed_packages_answer_type_is_found(monkeypatch):
    """An entry point of the group ``selectrust.answer_types`` is an answer type like a built-in one, after them in
    the list of accepted names; one that names something else is refused."""
    from importlib.metadata import EntryPoint

    from selectrust.core.errors import DataError

    group = parsers_module.ENTRY_POINT_GROUP
    assert group == "selectrust.answer_types"
    installed = [EntryPoint("word_count", f"{__name__}:WORD_COUNT", group),
                 EntryPoint("broken", f"{__name__}:WORD_COUNT", group)]
    monkeypatch.setattr("selectrust.core.plugins.entry_points", lambda group: installed)
    monkeypatch.setattr(parsers_module.ANSWER_TYPES, "installed", None)  # read the group again, then forget it
    monkeypatch.setattr(parsers_module.ANSWER_TYPES, "loaded", {})
    monkeypatch.setattr(parsers_module.ANSWER_TYPES, "failed", {})
    assert parse_answer("one two three", "word_count") == "3" and answers_match("3", 3, "word_count")
    assert parsers_module.answer_budget({"word_count"}) == 16
    assert parsers_module.ANSWER_TYPES.names()[-2:] == ["broken", "word_count"]
    assert list(parsers_module.ANSWER_TYPES)[-1] == "word_count"  # listing: the broken one left out
    with pytest.raises(DataError, match="answer_type plugin 'broken' cannot be used: .*not an AnswerType named "
                                        f"'broken'.* in group {group}"):
        parse_answer("x", "broken")
