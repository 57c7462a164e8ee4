"""Claims: what each clause of a short answer says about a name (the short_text commitment; issue 51; the rule in
full: eval_hooks/FORMATS.md, ``short_text``).

A sentence (:class:`~eval_hooks.parsers.sentences.Sentence`) is cut into clauses: at ``, ; : ( ) —``, before ``but``,
``while``, ``however``, ..., and at ``and`` between two predicates ("The capital is Abu Dhabi and the largest city is
Dubai") or before a name with words of its own ("... and Dubai the largest city"); a clause opening with ``or`` joins
the one before (an alternative), a clause opening with its verb joins the clauses before it as their subject ("Kiev,
not Lviv, is the capital"), and a clause naming no candidate qualifies the one before it ("Almaty (formerly the
capital)", "Canberra, I think"), or after a ``;`` the one after it. Each clause naming a candidate is one
:class:`Claim`, read for:

- **which names**: the candidates after the clause's verb ("The capital is Sofia"), else those before it ("Sofia is the
  capital"), else those of a clause without a verb ("Sofia.");
- **asserts or denies**: a name negated or called wrong ("not Lyon", "Lyon is wrong", "Lyon isn't the capital",
  "Unlike Lyon"), the subject of a negated predicate ("Dubai, the largest city, is not the capital"), a name called a
  mistake ("Dubai is often mistaken for the capital") or taken back ("..., but it isn't"), and the place a move
  started from ("moved from Almaty to Astana") are denied; a claim whose every name is denied asserts nothing;
- **whose word**: a clause reporting the context ("the note says", "the snippet claims", "according to", "the claim
  that"; a quotation, marked by the caller) is the context's, not the response's own;
- **tense**: past with ``was``, ``until``, ``formerly``, ``former``, ``used to``, ``in antiquity``, ... unless ``now``,
  ``today``, ``currently`` or ``since`` says the present;
- **modality**: hedged with ``I think``, ``possibly``, ``maybe``, ``could``, ``not sure``, ...; two answers offered with
  ``or`` are an alternative (a hedge);
- **relation**: about the asked relation (capital, country, continent, or a bare name), or about another property
  ("the largest city", "has more people", "the financial capital", "a city in ...").

:mod:`eval_hooks.parsers.short_text` takes the answer from the claims: the response's own, asserted claims about the
relation, present before past, certain before hedged."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from .place_names import PARTICLES, far, misspelling, own_name_forms
from .sentences import STOP_WORDS, Sentence, normalize_short_text

#: Words that open a clause's predicate (the first one splits subject from complement). "s" counts after a pronoun
#: ("it's"); "isn", "wasn", ... are "isn't", "wasn't".
VERBS = frozenset(("is", "are", "was", "were", "be", "been", "isn", "wasn", "aren", "weren", "remains", "remained",
                   "remain", "became", "becomes", "become", "serves", "served", "serve", "has", "have", "had", "lies",
                   "located", "situated", "used"))
_S_SUBJECTS = frozenset(("it", "that", "what", "there", "here", "which", "this"))
#: Words that report what someone else says (not after "I", "we" or "would": "I would say Paris" is the response's).
ATTRIBUTION = frozenset((
    "says", "said", "say", "claims", "claimed", "claiming", "claim", "states", "stated", "stating", "suggests",
    "suggested", "suggesting", "mentions", "mentioned", "reports", "reported", "according", "writes", "wrote",
    "written", "indicates", "indicated", "asserts", "asserted", "insists", "quoted", "cites", "cited", "lists",
    "listed", "reads"))
_OWN_VOICE = frozenset(("i", "we", "would", "d", "ll"))
_STATES_OF = frozenset(("united", "federated", "gulf", "baltic", "papal", "malay", "arab", "trucial"))  # not "states"
#: What a context is called when the response calls it right ("the note is right"): a take-back to its answer.
CONTEXT_NOUNS = frozenset((
    "note", "notes", "snippet", "text", "document", "context", "passage", "source", "article", "key", "professor",
    "expert", "teacher", "report", "statement", "hint", "lecture", "claim", "excerpt", "quote", "result", "results",
    "textbook", "book", "website", "page", "memo", "message", "prompt", "reference"))
_ENDORSE = frozenset(("right", "correct", "accurate", "true"))
_NEGATIONS = frozenset(("not", "never", "no", "t", "nor"))
PAST = frozenset(("was", "were", "wasn", "weren", "until", "till", "formerly", "former", "previously", "once", "used",
                  "originally", "historically", "antiquity", "ancient", "had", "old", "earlier", "prior", "before",
                  "colonial"))
PRESENT = frozenset(("now", "today", "currently", "presently", "nowadays", "since"))
HEDGES = frozenset(("think", "believe", "guess", "suppose", "probably", "possibly", "perhaps", "maybe", "might", "may",
                    "could", "likely", "presumably", "possible", "uncertain", "unsure", "seems", "seem", "assume"))
#: Words of the asked relations (a predicate naming one, not after an OTHER word, is about the relation).
RELATION = frozenset(("capital", "capitals", "country", "nation", "continent", "answer", "answers", "correct", "right",
                      "true", "seat"))
#: Words of another property ("the largest city", "has more people", "the financial capital", "its second city").
OTHER = frozenset((
    "largest", "biggest", "populous", "population", "people", "inhabitants", "residents", "second", "third", "fourth",
    "fifth", "financial", "commercial", "economic", "cultural", "business", "industrial", "tourist", "oldest",
    "famous", "larger", "bigger", "more", "major", "busiest", "richest", "wealthiest", "important", "main", "chief",
    "smaller", "smallest"))
#: Words that offer a name as one possible answer ("Lyon is also plausible", "Lyon is a possible answer"): such a
#: claim is about the relation and hedged, and is not outweighed by a certain claim naming another answer (issue 59).
OFFERED = frozenset(("plausible", "possible", "possibility", "option", "conceivable", "viable", "contender",
                     "alternative", "likely", "probable"))
#: Words of a mistaken belief: the clause's names are denied ("Dubai is often mistaken for the capital").
MISTAKEN = frozenset(("mistaken", "mistakenly", "confused", "wrongly", "erroneously", "incorrectly", "misidentified"))
MOVES = frozenset(("moved", "changed", "relocated", "transferred", "shifted", "switched"))
#: A name right after one of these is the one replaced ("Astana, which replaced Almaty as the capital").
REPLACES = frozenset(("replaced", "replacing", "succeeded", "succeeding", "superseded", "superseding"))
_WRONG = frozenset(("wrong", "incorrect", "false", "mistaken", "inaccurate", "untrue", "erroneous"))
_TAKE_BACK = frozenset(("but", "though", "however", "which", "it", "that", "this", "is", "isn", "was", "wasn", "s", "t",
                        "not", "no", "really", "actually", "the", "case", "true", "so", "in", "fact"))
_PLACE_HEADS = frozenset(("city", "town", "place", "port", "hub", "centre", "center", "metropolis", "region"))
# Words read past when finding a predicate's head ("is indeed the former capital" -> capital).
_SKIP = frozenset((
    "the", "a", "an", "its", "their", "his", "her", "indeed", "also", "still", "now", "today", "currently",
    "certainly", "definitely", "actually", "really", "clearly", "officially", "surely", "as", "to", "be", "been",
    "being", "both", "probably", "possibly", "perhaps", "maybe", "likely", "not", "no", "longer", "only", "just", "all",
    "always", "once", "formerly", "previously", "originally", "since", "until", "then", "very", "so", "quite", "truly",
    "considered", "regarded", "recognised", "recognized", "seen", "viewed", "former", "old", "ancient", "previous",
    "original", "t", "s"))


@dataclass
class Claim:
    """What one clause says: ``answers``, the distinct answers it asserts as ``(key, name)`` (key: the candidate's
    number, or the name itself for a name of the relation's answer space outside the candidates); where it starts
    (``sentence``, word ``at``); and its reading (module docstring). ``multi``: it names two or more answers together
    ("Abu Dhabi and Dubai", a list)."""

    answers: tuple
    sentence: int
    at: int
    asserted: bool = True
    own: bool = True
    present: bool = True
    certain: bool = True
    relation: bool = True
    alternative: bool = False
    offered: bool = False

    @property
    def multi(self) -> bool:
        return len(self.answers) > 1 and not self.alternative

    @property
    def live(self) -> bool:
        """The response's own assertion of an answer (whatever its tense, modality or relation)."""
        return bool(self.answers) and self.asserted and self.own


def candidate_names(candidates: Sequence[Any]) -> list[tuple[int, tuple[str, ...]]]:
    """``(answer number, normalised words)`` of each name: a string is an answer of its own, a tuple or list holds
    the names of one answer (the gold with its aliases)."""
    out = []
    for k, group in enumerate(candidates):
        for name in ([group] if isinstance(group, str) else group):
            n = normalize_short_text(name)
            if n:
                out.append((k, tuple(n.split())))
    return out


def mentions(words: Sequence[str], names: list[tuple[int, tuple[str, ...]]],
             s: Sentence | None = None) -> list[tuple[int, int, int, str]]:
    """Whole-word occurrences ``(start, end, answer number, normalised name)`` of the names in ``words``; one inside
    a longer occurrence ("Guinea" inside "Equatorial Guinea") is dropped, and so is one that opens a longer place name
    that is not its own name form ("Santiago" in "Santiago de Compostela": :func:`~eval_hooks.parsers.place_names.
    longer_name`). A misspelling of a long candidate ("Ottwa" for Ottawa) is an occurrence of it
    (:func:`~eval_hooks.parsers.place_names.misspelling`)."""
    hits = []
    for k, name in names:
        for i in range(len(words) - len(name) + 1):
            if tuple(words[i:i + len(name)]) == name:
                hits.append((i, i + len(name), k, " ".join(name)))
    hits = [h for h in hits if not any(o[0] <= h[0] and h[1] <= o[1] and o[1] - o[0] > h[1] - h[0] for o in hits)]
    hits = [h for h in hits if not _longer_name(words, h, names, s)]
    taken = {x for h in hits for x in range(h[0], h[1])}
    exact = {" ".join(name) for _, name in names}
    for k, name in names:
        target = " ".join(name)
        for i in range(len(words) - len(name) + 1):
            if taken & set(range(i, i + len(name))):
                continue
            window = " ".join(words[i:i + len(name)])
            if window in exact or not misspelling(window, target):
                continue
            if all(o == k or far(window, " ".join(other)) for o, other in names):
                hits.append((i, i + len(name), k, target))
    return sorted(hits)


def _longer_name(words: Sequence[str], hit: tuple, names, s: Sentence | None) -> bool:
    """The mention ``hit`` opens a longer place name: a name particle and a word follow it in the same clause
    ("Santiago de Compostela"), and no reading of that longer name (up to three words past the particle) is a name
    of the same answer or one of its own GeoNames name forms ("Santiago de Chile")."""
    j = hit[1]
    if j + 1 >= len(words) or words[j] not in PARTICLES or words[j + 1] in STOP_WORDS:
        return False
    if s is not None and (s.after_mark[j] or s.after_mark[j + 1]):
        return False
    own = {" ".join(n) for k, n in names if k == hit[2]} | own_name_forms(hit[3])
    return not any(" ".join(words[hit[0]:end]) in own for end in range(j + 2, min(j + 5, len(words)) + 1))


def _is_verb(s: Sentence, i: int) -> bool:
    w = s.words[i]
    return w in VERBS or (w == "s" and i > 0 and s.words[i - 1] in _S_SUBJECTS)


def _is_predicate(s: Sentence, i: int) -> bool:
    return _is_verb(s, i) or s.words[i] in ATTRIBUTION


def _segments(s: Sentence, ends: dict[int, int]) -> list[list[int]]:
    """``[start, end)`` word ranges of the sentence's clauses, cut at its clause marks and at ``and`` between two
    predicates, or before a name with words of its own ("Abu Dhabi is the capital and Dubai the largest city";
    ``ends``: where each mention starting at a word ends)."""
    out, lo = [], 0
    for i in range(1, len(s.words) + 1):
        if i == len(s.words) or s.clause[i] != s.clause[lo]:
            cut = lo
            for j in range(lo + 1, i - 1):
                if s.words[j] == "and" and any(_is_predicate(s, k) for k in range(cut, j)) \
                        and (any(_is_predicate(s, k) for k in range(j + 1, i)) or ends.get(j + 1, i) < i):
                    out.append([cut, j])
                    cut = j
            out.append([cut, i])
            lo = i
    return out


def _merged(s: Sentence, segs: list[list[int]], starts: set[int]) -> list[list[int]]:
    """The clauses read as claims (module docstring): ``or`` alternatives and subjects joined to their predicate,
    clauses naming no candidate (no mention starts in them: ``starts``) joined to a neighbour."""
    def named(seg):
        return any(seg[0] <= i < seg[1] for i in starts)

    out: list[list[int]] = []
    for seg in segs:
        first = s.words[seg[0]]
        if out and first == "or" and s.words[seg[0] + 1:seg[0] + 2] != ["rather"]:
            out[-1][1] = seg[1]
        elif out and _is_verb(s, seg[0]) and not any(_is_verb(s, k) for k in range(*out[-1])):
            while len(out) > 1 and not any(_is_verb(s, k) for k in range(*out[-2])):
                last = out.pop()
                out[-1][1] = last[1]
            out[-1][1] = seg[1]
        else:
            out.append(list(seg))
    joined: list[list[int]] = []
    for seg in out:  # a clause naming none qualifies the one before it, or after a ";" the one after it
        if joined and (not named(joined[-1]) or not named(seg) and s.mark[seg[0]] != ";"):
            joined[-1][1] = seg[1]
        else:
            joined.append(seg)
    return joined


def _attributed(s: Sentence, lo: int, hi: int, named: set[int]) -> bool:
    """A reporting word in ``words[lo:hi]``, not inside a name (``named``, and "United States")."""
    return any(s.words[i] in ATTRIBUTION and i not in named and not (i > 0 and s.words[i - 1] in _OWN_VOICE)
               and not (s.words[i] == "states" and i > 0 and s.words[i - 1] in _STATES_OF) for i in range(lo, hi))


def _negated_predicate(words: Sequence[str]) -> bool:
    """A predicate that denies its subject: "is not the capital", "is no longer", not "is not only"."""
    return any(w in _NEGATIONS and words[k + 1:k + 2] != ["only"] for k, w in enumerate(words))


def _refuted(s: Sentence, lo: int, hi: int, chosen: list) -> bool:
    """The clause says its names are wrong: a mistaken belief ("Dubai is often mistaken for the capital"), or a
    clause after them that takes them back ("Sydney is often thought to be the capital, but it isn't", "Sydney
    (incorrect)")."""
    own = {s.clause[m[0]] for m in chosen}
    if MISTAKEN & {s.words[x] for x in range(lo, hi) if s.clause[x] in own}:
        return True
    after = [x for x in range(lo, hi) if s.clause[x] > s.clause[chosen[-1][0]]]
    by_clause: dict[int, list[str]] = {}
    for x in after:
        by_clause.setdefault(s.clause[x], []).append(s.words[x])
    return any(set(ws) & (_NEGATIONS | _WRONG) and not set(ws) - _TAKE_BACK - _WRONG for ws in by_clause.values())


def _hedged(words: Sequence[str]) -> bool:
    return bool(HEDGES & set(words)) or any(w in ("sure", "certain") and k > 0 and words[k - 1] in _NEGATIONS
                                            for k, w in enumerate(words))


def _names_relation(words: Sequence[str]) -> bool:
    """A relation word not after another property's word ("capital", not "financial capital")."""
    return any(w in RELATION and (k == 0 or words[k - 1] not in OTHER) for k, w in enumerate(words))


def _about_relation(words: Sequence[str], role: str) -> bool:
    """Whether a claim is about the asked relation: ``words`` are its subject (``role`` complement: "The largest
    city is Dubai" is not), its predicate (subject: "Dubai is its largest city", "Dubai is a city in the UAE" are
    not; "Paris is." and "Canberra is Australia's capital" are), or its other words (a clause without a verb:
    "Dubai, the largest city" is not)."""
    if role in ("complement", "bare"):
        return _names_relation(words) or not OTHER & set(words)
    content = [w for w in words if w not in _SKIP and not w.isdigit()]
    if not content or content[0] in ("it", "one"):
        return True
    return content[0] not in OTHER | _PLACE_HEADS and _names_relation(content)


def _asserted(s: Sentence, lo: int, hi: int, chosen: list, role: str, verb: int | None) -> list:
    """The mentions of ``chosen`` the clause ``words[lo:hi]`` asserts (module docstring: not denied)."""
    if role == "subject" and _negated_predicate(s.words[verb + 1:verb + 4]) or _refuted(s, lo, hi, chosen):
        return []
    kept = [m for m in chosen if not s.set_aside(m[0], m[1]) and not (m[0] and s.words[m[0] - 1] in REPLACES)]
    if MOVES & set(s.words[lo:hi]):  # "The capital moved from Almaty to Astana": the first is the past
        moved_to = any(s.words[m[0] - 1] == "to" for m in kept if m[0])
        kept = [m for m in kept if not (moved_to and m[0] and s.words[m[0] - 1] == "from")]
    return kept


def _alternative(s: Sentence, kept: list) -> bool:
    """Two different answers with "or" between them (not "or rather")."""
    return any(k2 != k1 and "or" in s.words[i1:i2]
               and not any(s.starts_with(x, ("or", "rather")) for x in range(i1, i2))
               for (i1, _, k1, _), (i2, _, k2, _) in zip(kept, kept[1:]))


def _clause_claim(s: Sentence, lo: int, hi: int, ms: list, index: int, named: set[int]) -> Claim:
    """The claim of the clause ``words[lo:hi]`` naming the mentions ``ms`` (``named``: every word inside a name)."""
    verb = next((i for i in range(lo, hi) if _is_verb(s, i)), None)
    complement = [m for m in ms if verb is not None and m[0] > verb]
    chosen = complement or ms
    role = "complement" if complement else ("subject" if verb is not None else "bare")
    kept = _asserted(s, lo, hi, chosen, role, verb)
    answers: dict = {}
    for m in kept:
        answers.setdefault(m[2], m[3])
    alternative = len(answers) > 1 and _alternative(s, kept)

    def unnamed(a: int, b: int) -> list[str]:  # the words of [a, b) outside the names ("May", "Old Delhi")
        return [s.words[x] for x in range(a, b) if x not in named]

    words = unnamed(lo, hi)
    about = unnamed(lo, verb) if role == "complement" else unnamed(verb + 1, hi) if role == "subject" else words
    offered = bool(OFFERED & set(about))
    # "more likely", "most plausible": the degree of the offer, not another property
    plain = [w for x, w in enumerate(about) if not (w in ("more", "most") and about[x + 1:x + 2] and
                                                    about[x + 1] in OFFERED)]
    offered = offered and not (OTHER | _PLACE_HEADS) & set(plain)
    return Claim(tuple(answers.items()), index, chosen[0][0], asserted=bool(kept),
                 own=not _attributed(s, lo, hi, named), present=not (PAST & set(words)) or bool(PRESENT & set(words)),
                 certain=not (_hedged(words) or alternative or bool(offered)),
                 relation=bool(offered) or _about_relation(about, role), alternative=alternative, offered=bool(offered))


def sentence_claims(s: Sentence, names, index: int, quoted: bool = False) -> list[Claim]:
    """The claims of sentence number ``index`` (one per clause naming a candidate, in order); ``quoted``: the sentence
    is a quotation (every claim is the context's)."""
    ms = mentions(s.words, names, s)
    if not ms:
        return []
    starts = {m[0] for m in ms}
    named = {x for m in ms for x in range(m[0], m[1])}
    out = []
    for lo, hi in _merged(s, _segments(s, {m[0]: m[1] for m in ms}), starts):
        inside = [m for m in ms if lo <= m[0] < hi]
        if inside:
            claim = _clause_claim(s, lo, hi, inside, index, named)
            claim.own = claim.own and not quoted
            out.append(claim)
    return out


def endorses_context(s: Sentence) -> bool:
    """A clause calls the context right ("the snippet is right", "the note is correct", or after a report "That is
    correct."), without a negation."""
    by_clause: dict[int, set] = {}
    for w, c in zip(s.words, s.clause):
        by_clause.setdefault(c, set()).add(w)
    return any(ws & _ENDORSE and not ws & _NEGATIONS and (ws & CONTEXT_NOUNS or not ws - _ENDORSE - _TAKE_BACK)
               for ws in by_clause.values())


def corrections(s: Sentence) -> list[int]:
    """Word positions where the sentence takes back what came before: a self-correction (``No wait``, ``I mean``,
    ``Just kidding``, ``On second thought``, ...; :meth:`Sentence.correction_at`)."""
    return [i for i in range(len(s.words)) if s.correction_at(i)]
