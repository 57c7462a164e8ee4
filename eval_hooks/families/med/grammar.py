"""The question grammar and alias collection behind the MedCounterfact builder.

MedEvidence questions follow one template::

    Is <outcome> higher, lower, or the same [when] comparing <T> <connector> <C>[ ?]

with connector ``to`` (preferred), ``versus``/``vs``, ``with`` or ``and``. :func:`parse_question`
picks the connector (``to`` inside "up to", "added to", "due to", "prior to" does not split), then
splits T into a head term and its qualifiers (dose "120 mg", count "two doses of", timing
"administered preoperatively", "alone", "added to X", "of any dose", "of at least 12 weeks", a
combination partner already in C). Questions whose T is a population, a group or a condition, or
whose head also names the comparator, are excluded with a reason.

:func:`collect_aliases` finds how the evidence names the head: hyphen/space and case variants,
plural and possessive forms, abbreviations given in the question or defined in the text
("botulinum toxin type A (BoNT-A)"). All matching happens on :func:`normalize` d text (Unicode
hyphens, dashes and spaces mapped to ASCII).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_UNICODE = {"\u2010": "-", "\u2011": "-", "\u2012": "-", "\u2013": "-", "\u2014": "-", "\u2212": "-",
            "\u00a0": " ", "\u2009": " ", "\u202f": " ", "\u2018": "'", "\u2019": "'", "\u201c": '"',
            "\u201d": '"'}
_UNICODE_RE = re.compile("|".join(_UNICODE))


def normalize(text: str) -> str:
    """Unicode hyphens/dashes -> ``-``, odd spaces -> `` ``, curly quotes -> straight (length-preserving)."""
    return _UNICODE_RE.sub(lambda m: _UNICODE[m.group(0)], text)


_CLAUSE = re.compile(r"\bcompar(?:ing|ed|e)\s+(?P<clause>.+?)\s*\??\s*$", re.IGNORECASE | re.DOTALL)
_CONNECTORS = ("to", "versus", "vs.", "vs", "with", "and")
_NOT_SPLIT_BEFORE_TO = ("up", "added", "due", "prior", "compared", "according", "equivalent")
_LEADING = re.compile(r"^(?:(?:the|a|an|following|only|use of|the use of)\s+)+", re.IGNORECASE)
_GROUP_WITH = re.compile(r"^(?:the\s+)?(?:study\s+|intervention\s+|treatment\s+)?group\s+(?:with|who\s+underwent|"
                         r"receiving|treated\s+with)\s+(?P<t>.+)$", re.IGNORECASE)
_GROUP_SUFFIX = re.compile(r"^(?P<t>.+?)\s+group$", re.IGNORECASE)
_PEOPLE = re.compile(r"^(?:people|patients|participants|women|men|children|infants)\s+(?:offered|given|receiving|"
                     r"treated\s+with)\s+(?P<t>.+)$", re.IGNORECASE)
_NUM = r"(?:\d+(?:[.,]\d+)?|one|two|three|four|five|six|seven|eight|nine|ten|twelve|single)"
_PREFIX_QUALIFIERS = [
    re.compile(rf"^{_NUM}(?:\s*-\s*\d+)?\s*(?:mg|g|mcg|µg|ml|mL|IU|units?)(?:/kg)?\s+(?:of\s+)?", re.IGNORECASE),
    re.compile(rf"^{_NUM}(?:\s*-\s*\d+)?\s+(?:doses?|weeks?|months?|days?|years?|sessions?)\s+of\s+", re.IGNORECASE),
    re.compile(r"^(?:single|double|low|high|standard)[- ]dose\s+", re.IGNORECASE),
]
_SUFFIX_QUALIFIERS = [
    re.compile(r"\s+(?:administered|given|started|delivered)\s+\w+$", re.IGNORECASE),
    re.compile(r"\s+of\s+any\s+dose$", re.IGNORECASE),
    re.compile(rf"\s+of\s+at\s+least\s+{_NUM}\s+\w+$", re.IGNORECASE),
    re.compile(r"\s+with\s+or\s+without\s+.+$", re.IGNORECASE),
    re.compile(r"\s+(?:added\s+to|in\s+combination\s+with|as\s+an?\s+\w+\s+\w+\s+with|as\s+add-on\s+to)\s+.+$",
               re.IGNORECASE),
    re.compile(rf"\s+up\s+to\s+{_NUM}\s+\w+.*$", re.IGNORECASE),
    re.compile(r"\s+(?:alone|only)$", re.IGNORECASE),
]
#: heads that are a population, a group, a condition or a bare time span, never an intervention
EXCLUDED_HEADS = {
    "children", "patients", "people", "women", "men", "infants", "participants", "study group", "group",
    "control", "control group", "intervention group", "macular hole", "treatment",
}
_TIME_ONLY = re.compile(rf"^{_NUM}(?:\s*-\s*\d+)?\s+(?:weeks?|months?|days?|years?)(?:\s+of\s+treatment)?$",
                        re.IGNORECASE)
_PAREN = re.compile(r"^(?P<name>.+?)\s*\((?P<abbr>[^()]{1,20})\)$")


@dataclass
class Parsed:
    """One question's comparison. ``head`` is what gets substituted; ``excluded`` says why not."""

    intervention: str  # T as written (after leading articles)
    comparator: str  # C as written
    head: str  # T without qualifiers
    qualifiers: list[str] = field(default_factory=list)
    abbreviation: str | None = None  # "(TDC)" in the question
    excluded: str | None = None


def _split_clause(clause: str) -> tuple[str, str] | None:
    words = clause.split(" ")
    for conn in _CONNECTORS:
        for i in range(1, len(words) - 1):
            if words[i].lower() != conn:
                continue
            if conn == "to" and words[i - 1].lower() in _NOT_SPLIT_BEFORE_TO:
                continue
            return " ".join(words[:i]).strip(" ,"), " ".join(words[i + 1:]).strip(" ,")
    return None


def _strip_qualifiers(t: str, comparator: str) -> tuple[str, list[str]]:
    quals: list[str] = []
    changed = True
    while changed:
        changed = False
        for pat in _PREFIX_QUALIFIERS:
            m = pat.match(t)
            if m and m.end() < len(t):
                quals.append(m.group(0).strip())
                t, changed = t[m.end():].strip(), True
        for pat in _SUFFIX_QUALIFIERS:
            m = pat.search(t)
            if m and m.start() > 0:
                quals.append(m.group(0).strip())
                t, changed = t[:m.start()].strip(), True
        m = _LEADING.match(t)
        if m and m.end() < len(t):
            t, changed = t[m.end():], True
    # "X plus Y" where one side is already the comparator: the other side is the intervention
    parts = re.split(r"\s+plus\s+|\s+\+\s+", t)
    if len(parts) == 2:
        c = comparator.lower()
        left, right = parts
        if _core(left) in c and _core(right).split()[0] in c:
            quals.append("plus-partners both in the comparator")
        elif _core(left) in c and _core(right) not in c:
            quals.append(f"plus-partner {left}")
            t = right
        elif _core(right) in c and _core(left) not in c:
            quals.append(f"plus-partner {right}")
            t = left
    return t.strip(" ,"), quals


def _core(term: str) -> str:
    m = _PAREN.match(term)
    return (m.group("name") if m else term).strip().lower()


def parse_question(question: str) -> Parsed | None:
    """The comparison in a MedEvidence question, or ``None`` when the template does not match."""
    m = _CLAUSE.search(normalize(question).strip())
    if not m:
        return None
    split = _split_clause(m.group("clause").strip())
    if split is None:
        return None
    t_raw, c = split
    t = _LEADING.sub("", t_raw).strip()
    for pat in (_GROUP_WITH, _PEOPLE):
        g = pat.match(t)
        if g:
            t = g.group("t").strip()
    g = _GROUP_SUFFIX.match(t)
    if g and g.group("t").lower() not in ("the", "study", "control"):
        t = _LEADING.sub("", g.group("t")).strip()
    head, quals = _strip_qualifiers(t, c)
    p = Parsed(intervention=t, comparator=c, head=head, qualifiers=quals)
    pm = _PAREN.match(head)
    if pm and not is_abbreviation(pm.group("abbr").strip()):
        p.qualifiers.append(f"({pm.group('abbr')})")
        p.head = pm.group("name").strip()
    elif pm:
        p.head, p.abbreviation = pm.group("name").strip(), pm.group("abbr").strip()
    low = p.head.lower()
    if low in EXCLUDED_HEADS or _TIME_ONLY.match(p.head):
        p.excluded = f"intervention {p.head!r} is a population, group, condition or time span"
    elif len(low) < 3:
        p.excluded = f"intervention {p.head!r} is too short to substitute safely"
    elif "plus-partners both in the comparator" in quals:
        p.excluded = f"both parts of {t!r} also occur in the comparator {c!r}"
    elif _mentions(c, p.head) or (p.abbreviation and re.search(rf"(?<!\w){re.escape(p.abbreviation)}(?!\w)", c)):
        p.excluded = f"intervention {p.head!r} also names the comparator {c!r}"
    return p


def _mentions(text: str, term: str) -> bool:
    return re.search(rf"(?<![\w-]){_flex(term)}(?![\w-])", normalize(text), re.IGNORECASE) is not None


def _flex(term: str) -> str:
    """Regex for ``term`` allowing hyphen/space/nothing between its parts and an optional plural/possessive."""
    parts = [re.escape(p) for p in re.split(r"[-\s]+", term.strip()) if p]
    body = r"(?:[-\s]?)".join(parts)
    if term[-1:].lower() == "s" and len(term) > 4 and not term.lower().endswith("ss"):
        body = body[:-1] + r"(?:s|es)?"  # "NSAIDs" also matches "NSAID"
    return body + r"(?:s|es)?(?:'s)?"


def alias_pattern(aliases: list[str]) -> re.Pattern:
    """One regex matching any alias: names case-insensitively, abbreviations (two or more capitals)
    case-sensitively with an optional hyphen or space ("BoNT-A" / "BoNTA" / "BoNT A"); longest alias
    first; never inside a longer word."""
    names = sorted((a for a in aliases if not is_abbreviation(a)), key=len, reverse=True)
    abbrs = sorted((a for a in aliases if is_abbreviation(a)), key=len, reverse=True)
    alts = [f"(?i:{_flex(a)})" for a in names]
    alts += [r"[-\s]?".join(re.escape(p) for p in a.split("-")) + r"s?" for a in abbrs]
    return re.compile(r"(?<![\w-])(?:" + "|".join(alts) + r")(?![\w-])")


def is_abbreviation(term: str) -> bool:
    return len(term) <= 12 and " " not in term and sum(ch.isupper() for ch in term) >= 2


def collect_aliases(p: Parsed, texts: list[str]) -> list[str]:
    """Surface forms of the head found in ``texts`` (question and abstracts), for substitution.

    The head itself, the question's abbreviation, spelling variants and listed synonyms found in the
    texts, parts of a multi-word head the abstracts use (:func:`_sub_phrases`, only when the head is
    missing from some abstract), abbreviations the texts define right after a name ("tranexamic acid
    (TXA)"), and long forms defined by an abbreviation ("... antigen 85A (MVA85A)"). Returns the aliases
    (not their hyphen/plural variants), longest first.
    """
    aliases = [p.head]
    if p.abbreviation and is_abbreviation(p.abbreviation):
        aliases.append(p.abbreviation)
    aliases += [v for v in _spelling_variants(p.head) if any(_mentions(t, v) for t in texts)]
    if not all(any(_mentions(t, a) for a in aliases) for t in texts[1:]):
        aliases += _sub_phrases(p, texts)
    comp = normalize(p.comparator)
    for name in [a for a in aliases if not is_abbreviation(a)]:  # "tranexamic acid (TXA)"
        defined = re.compile(rf"(?<![\w-])(?i:{_flex(name)})\s*\((?P<abbr>[A-Za-z][\w-]{{0,10}})[);,]")
        for t in texts:
            for m in defined.finditer(normalize(t)):
                a = m.group("abbr")
                fits = any(_initials_fit(a, n) for n in (name, p.head)) or \
                    _variant_abbreviation(a, (name, p.head), normalize(t)[:m.start()], comp)
                if is_abbreviation(a) and a not in aliases and fits \
                        and not re.search(rf"(?<!\w){re.escape(a)}(?!\w)", comp):
                    aliases.append(a)
    for abbr in [a for a in aliases if is_abbreviation(a)]:  # "modified vaccinia virus Ankara ... (MVA85A)"
        for t in texts:
            long_form = _long_form(normalize(t), abbr, [a for a in aliases if not is_abbreviation(a)])
            if long_form and long_form not in aliases and not _mentions(comp, long_form):
                aliases.append(long_form)
    return sorted(dict.fromkeys(aliases), key=len, reverse=True)


def _long_form(text: str, abbr: str, names: list[str]) -> str | None:
    """The words defined by ``(abbr)`` in ``text``: the shortest run of at most 8 words before it, back
    to no clause boundary, that starts with the abbreviation's first letter and contains its letters in
    order; ``None`` when there is none or when a known name already ends right there."""
    i = text.find(f"({abbr})")
    if i <= 0:
        return None
    before = text[:i].rstrip()
    if any(re.search(rf"(?<![\w-])(?i:{_flex(n)})$", before) for n in names):
        return None
    seg = re.split(r"[,;:.()]", before)[-1].split()[-8:]
    for k in range(len(seg) - 2, -1, -1):
        cand = " ".join(seg[k:])
        if seg[k][:1].lower() == abbr[0].lower() and _initials_fit(abbr, cand):
            return cand
    return None


def _variant_abbreviation(abbr: str, names: tuple[str, ...], before: str, comp: str) -> bool:
    """``abbr`` defined after one of ``names`` names a variant of it: it holds the name's initials after a letter
    of the word before the name ("nasal continuous positive airway pressure (nCPAP)"), and that word is not the
    comparator's ("sham plasma-exchange (SPE)" against "sham exchange" is the control, not T)."""
    prev = before.split()[-1:] if before.strip() else []
    if not prev or prev[0][:1].lower() != abbr[:1].lower():
        return False
    if prev[0].lower().strip(",;") in normalize(comp).lower().split():
        return False
    return any(_holds_initials(abbr, n) for n in names)


def _holds_initials(abbr: str, name: str) -> bool:
    """``abbr`` contains the initials of ``name``'s words (at least two): "nCPAP" for "continuous positive
    airway pressure", a variant (nasal CPAP) of the same intervention, so an alias of it."""
    initials = "".join(w[0] for w in re.split(r"[\s-]+", name) if w and w[0].isalpha())
    return len(initials) >= 2 and initials.lower() in abbr.lower()


def _initials_fit(abbr: str, head: str) -> bool:
    """``abbr`` starts with the head's first letter and its letters appear in order in the head."""
    a, h = [c for c in abbr.lower() if c.isalpha()], head.lower()
    if not a or a[0] != h[:1]:
        return False
    pos = 0
    for c in a:
        pos = h.find(c, pos)
        if pos == -1:
            return False
        pos += 1
    return True


#: words that never make an alias on their own (too generic to mean the intervention)
GENERIC = {"therapy", "treatment", "regimen", "supplementation", "initiation", "testing", "monitoring", "procedure",
           "intervention", "interventions", "screening", "care", "group", "training", "information", "of", "with",
           "and", "for", "a", "the", "at", "in", "to", "or", "early", "late", "standard", "routine", "combined",
           "continuous", "extended", "rapid", "low", "high", "moderate", "normal", "based", "led", "on", "site",
           "use", "management", "self", "technology", "assessment", "including", "measurement", "protein",
           "concentration", "diet", "prophylaxis", "drug", "drugs", "therapist", "surgery", "method", "very",
           "device", "free"}
SYNONYMS = {"paracetamol": ["acetaminophen"], "grehlin": ["ghrelin"], "esophagectomy": ["oesophagectomy"],
            "ssris": ["selective serotonin reuptake inhibitors", "SSRI"], "nsaids": ["NSAID"],
            "thrombo-aspiration": ["aspiration thrombectomy", "direct aspiration"],
            "cholinase inhibitors": ["cholinesterase inhibitor"], "ppost-mastectomy radiotherapy":
            ["postmastectomy radiotherapy", "post-mastectomy radiotherapy", "postmastectomy radiation therapy"]}


def _spelling_variants(term: str) -> list[str]:
    """British/American spelling and listed synonyms of ``term``."""
    out = list(SYNONYMS.get(term.lower(), []))
    for a, b in (("oe", "e"), ("ae", "e"), ("isation", "ization"), ("ise", "ize"), ("our", "or")):
        if a in term:
            out.append(term.replace(a, b))
        elif b in term and a not in ("oe", "ae"):
            out.append(term.replace(b, a))
    return [v for v in out if v != term]


_ADJ = re.compile(r"(?:al|ic|ive|ous|ed|ary|ate|ing|led|like)$", re.IGNORECASE)


def _sub_phrases(p: Parsed, texts: list[str]) -> list[str]:
    """Contiguous parts of a multi-word head that the evidence uses. The head's core is the part
    before its first preposition; a multi-word part must end the core (unless the core ends in a
    generic word), a one-word part must be a long non-adjective word other than the core's last word
    (the agent, e.g. "chlorhexidine"; a lone head noun such as "attendance" names other things too). No part
    may be only generic words, name the comparator, or occur in the question outside T (the outcome)."""
    words = re.split(r"\s+", p.head)
    cut = next((i for i, w in enumerate(words) if w.lower() in ("of", "with", "for", "including", "at", "in")),
               len(words))
    core = words[:cut] or words
    comp_words = {w.lower() for w in re.split(r"[\s,/()-]+", normalize(p.comparator)) if w}
    rest_of_question = normalize(texts[0]).replace(p.intervention, " ")
    last = core[-1].lower()
    found: list[str] = []
    for n in range(len(words) - 1, 0, -1):
        for i in range(len(words) - n + 1):
            ws = [w.lower().strip(",") for w in words[i:i + n]]
            sub = " ".join(words[i:i + n]).strip(" ,")
            if all(w in GENERIC for w in ws) or not any(w not in comp_words and w not in GENERIC for w in ws):
                continue
            if n == 1 and not (len(sub) >= 9 and "-" not in sub and not _ADJ.search(sub) and i != len(core) - 1):
                continue  # a lone head noun ("attendance", "closure") names other things too
            if n > 1 and (not (i <= len(core) - 1 < i + n) if last not in GENERIC else i + n > len(core)):
                continue
            if len(sub) < 4 or _mentions(p.comparator, sub) or _mentions(rest_of_question, sub) \
                    or any(sub.lower() in f.lower() for f in found):
                continue
            if any(_mentions(t, sub) for t in texts[1:]):
                found.append(sub)
    return found
