"""What short_text reads a response with: the normalisation of a name (:func:`normalize_short_text`), the cut of a
text into sentences (:func:`split_sentences`) and a sentence as folded words with their clauses (:class:`Sentence`:
negations, "X is wrong", self-corrections). The claims built on them: :mod:`eval_hooks.parsers.claims`; the rule that
uses them: :func:`eval_hooks.parsers.short_text.read_short_text`; in full, eval_hooks/FORMATS.md."""

from __future__ import annotations

import re
import unicodedata
from typing import Any

_ARTICLE_WORDS = ("the", "a", "an")
#: Words that are never a name: a short_text gold, alias or wrong value equal to one (after normalisation) is refused
#: when the data loads (an alias "The" would match "It is the one in the west").
STOP_WORDS = frozenset((
    "the", "a", "an", "of", "and", "or", "in", "on", "at", "to", "from", "by", "for", "with", "as", "is", "are", "was",
    "be", "it", "its", "this", "that", "not", "no", "yes", "but", "if", "so", "one", "he", "she", "they", "we", "i",
    "you"))
_NON_WORD = re.compile(r"[\W_]+")
# Sentence ends: . ! ? followed by a space or the end, or a line break; not after a capital letter ("D.C.") or an
# abbreviation inside a name (_ABBREVIATIONS: "St. Petersburg", "Mt. Kenya", "Ft. Worth").
_SENTENCE_END = re.compile(r"(?<![A-Z])[.!?](?=\s|$)|\n")
_ABBREVIATIONS = frozenset(("st", "ste", "mt", "mts", "ft", "pt", "dr", "mr", "mrs", "ms", "jr", "sr", "prof", "gen",
                            "lt", "col", "capt", "sgt", "rev", "fr", "vs", "approx"))
_WORD_BEFORE = re.compile(r"(\w+)$")
#: Abbreviations inside names, read as the word they stand for ("St. Petersburg" = "Saint Petersburg").
_NAME_ABBREVIATIONS = {"st": "saint", "ste": "sainte", "mt": "mount", "ft": "fort"}
MAX_SENTENCE_CHARS = 1000  # a sentence is read up to here (a short answer is far shorter; bounds the work)


def _accented_script(c: str) -> bool:
    """Latin and Greek letters, whose combining marks are accents (``á``, ``ç``, ``ά``) that a name is matched
    without."""
    return c < "\u0250" or unicodedata.name(c, "").startswith(("LATIN", "GREEK"))


def _strip_accents(value: str) -> str:
    """NFKD, the combining marks on Latin and Greek letters dropped (``Bogotá`` -> ``Bogota``), then NFC: a letter
    of another script keeps its marks, so no base character changes (``パリ`` stays ``パリ``, not ``ハリ``; ``й``
    stays ``й``)."""
    out: list[str] = []
    for c in unicodedata.normalize("NFKD", value):
        if unicodedata.combining(c) and out and _accented_script(out[-1]):
            continue
        out.append(c)
    return unicodedata.normalize("NFC", "".join(out))


def normalize_short_text(value: Any) -> str | None:
    """Case-folded, accents removed from Latin and Greek letters, punctuation turned to spaces, the abbreviations
    St/Ste/Mt/Ft read as Saint/Sainte/Mount/Fort, one leading article (the/a/an) dropped: ``"The Hague"`` ->
    ``"hague"``, ``"St. Petersburg"`` -> ``"saint petersburg"``, ``"Bogotá"`` -> ``"bogota"``, ``"Côte d'Ivoire"`` ->
    ``"cote d ivoire"``; letters of other scripts are kept whole (``"パリ"`` -> ``"パリ"``, ``"Київ"`` -> ``"київ"``)."""
    if not isinstance(value, str):
        return None
    words = [_NAME_ABBREVIATIONS.get(w, w) for w in _NON_WORD.sub(" ", _strip_accents(value).casefold()).split()]
    if len(words) > 1 and words[0] in _ARTICLE_WORDS:
        words = words[1:]
    return " ".join(words) or None


def split_sentences(span: str) -> list[str]:
    """``span`` cut at sentence ends (:data:`_SENTENCE_END`, not after an abbreviation of :data:`_ABBREVIATIONS`);
    a piece that ends with a colon or a copula ("The capital of France is:") is joined with the next non-empty one,
    so an answer after a colon or a line break is read through."""
    pieces, start = [], 0
    for m in _SENTENCE_END.finditer(span):
        before = _WORD_BEFORE.search(span[max(0, m.start() - 8):m.start()])
        if m.group() == "." and before and before.group(1).casefold() in _ABBREVIATIONS:
            continue
        pieces.append(span[start:m.end()])
        start = m.end()
    pieces.append(span[start:])
    out: list[str] = []
    for piece in (p.strip() for p in pieces):
        if not piece.strip(".!? \t"):
            continue
        if out and re.search(r"(?::|\b(?:is|are|was))\s*$", out[-1], re.IGNORECASE):
            out[-1] = f"{out[-1]} {piece}"
        else:
            out.append(piece)
    return out


# Tokens of a folded sentence: words, and the punctuation marks that end a clause.
_TOKEN = re.compile(r"[^\W_]+|[,;:()\[\]—–]|\s-\s")
_CLAUSE_WORDS = frozenset(("but", "while", "whereas", "although", "though", "however", "yet", "unlike", "besides",
                           "except"))
#: Clause openers that set aside the names of their clause ("Unlike Istanbul, ...", "Between Canberra and Sydney, ...");
#: "while", "although", ... open a
#: clause that is read for what it claims (another property, the context's word), not set aside as a whole.
_ASIDE_OPENERS = frozenset(("unlike", "besides", "except", "between", "among", "amongst"))
_NEGATIONS = frozenset(("not", "never", "nor", "neither"))
#: "not" in other languages ("Roma, non Milano", "Paris, pas Lyon", "Madrid, no Barcelona", "Berlin, nicht München",
#: "Lisboa, não Porto", "Москва, не ..."): a negation only where it opens its clause right before the name (an English
#: "no" inside a clause, "There is no doubt the capital is Paris", negates nothing).
_NEGATIONS_ELSEWHERE = frozenset(("non", "pas", "no", "nicht", "nao", "nie", "niet", "inte", "ikke", "ei", "ne", "не",
                                  "ні", "nu", "nem", "ni"))
_NEGATION_PHRASES = (("rather", "than"), ("instead", "of"), ("as", "opposed", "to"), ("other", "than"))
_NT_VERBS = frozenset(("isn", "wasn", "aren", "weren", "doesn", "don", "didn", "can", "couldn", "won", "wouldn", "ain"))
_COPULA_WORDS = frozenset(("is", "was", "are", "were", "be"))
_WRONG_WORDS = frozenset(("wrong", "incorrect", "false", "mistaken", "inaccurate", "untrue", "erroneous", "mistake",
                          "error"))
_NOT_THE_ANSWER = frozenset(("capital", "answer", "correct", "right", "true"))
_CORRECTIONS = (("no", "wait"), ("wait",), ("no", "actually"), ("no",), ("sorry",), ("correction",), ("i", "mean"),
                ("i", "meant"), ("or", "rather"), ("rather",), ("scratch", "that"), ("my", "mistake"), ("oops",),
                ("just", "kidding"), ("actually", "no"), ("actually", "it"), ("actually", "the", "answer"),
                ("actually", "the", "capital"), ("on", "second", "thought"), ("on", "second", "thoughts"),
                ("on", "reflection"), ("never", "mind"), ("let", "me", "correct"))


class Sentence:
    """A sentence as folded words (``words``) with their clause numbers (``clause``: a new clause at ``, ; : ( ) —``
    and before ``but``, ``while``, ``however``, ...), and each word's place in the folded text ``folded``
    (``spans``)."""

    def __init__(self, text: str):
        self.folded = _strip_accents(text[:MAX_SENTENCE_CHARS]).casefold()
        self.words: list[str] = []
        self.clause: list[int] = []
        self.spans: list[tuple[int, int]] = []
        self.after_mark: list[bool] = []  # the word follows a clause mark directly
        self.mark: list[str] = []  # the clause mark it follows directly ("" for none)
        clause, marked, mark = 0, True, ""
        for m in _TOKEN.finditer(self.folded):  # "isn't" -> isn, t
            tok = m.group().strip()
            if not tok[0].isalnum():
                clause, marked, mark = clause + 1, True, tok
                continue
            if tok in _CLAUSE_WORDS and self.words:
                clause += 1
            self.words.append(_NAME_ABBREVIATIONS.get(tok, tok))
            self.clause.append(clause)
            self.spans.append(m.span())
            self.after_mark.append(marked)
            self.mark.append(mark if marked else "")
            marked, mark = False, ""

    def starts_with(self, i: int, phrase: tuple[str, ...]) -> bool:
        return tuple(self.words[i:i + len(phrase)]) == phrase

    def negated(self, i: int) -> bool:
        """A negation in the clause of word ``i``, before it ("not Lyon", "isn't Lyon", "rather than Lyon")."""
        c, j = self.clause[i], i - 1
        if j >= 0 and self.words[j] in _NEGATIONS_ELSEWHERE and self.after_mark[j] and not self.after_mark[i] \
                and (j == 0 or self.mark[j] in (",", ";", "(", "—", "–")):
            return True
        while j >= 0 and self.clause[j] == c:
            w = self.words[j]
            if w in _NEGATIONS or (w == "t" and j > 0 and self.words[j - 1] in _NT_VERBS):
                return True
            if any(self.starts_with(j, p) and j + len(p) <= i for p in _NEGATION_PHRASES):
                return True
            j -= 1
        return False

    def called_wrong(self, end: int) -> bool:
        """The words after a mention (ending at ``end``), in its clause, say it is wrong: "Lyon is wrong",
        "Lyon is not the capital", "Lyon isn't correct"."""
        c = self.clause[end - 1]
        rest = [w for k, w in enumerate(self.words[end:end + 6], start=end) if self.clause[k] == c]
        if rest[:1] and rest[0] in _COPULA_WORDS | {"s"}:
            rest = rest[1:]
        elif rest[:2] and rest[0] in _NT_VERBS and rest[1] == "t":
            rest = ["not", *rest[2:]]
        if rest[:1] and rest[0] in _WRONG_WORDS:
            return True
        if rest[:1] == ["not"]:
            rest = [w for w in rest[1:] if w not in _ARTICLE_WORDS]
            return not rest or rest[0] in _NOT_THE_ANSWER
        return rest[:2] in (["a", "mistake"], ["an", "error"])

    def set_aside(self, i: int, end: int) -> bool:
        """The mention ``words[i:end]`` is denied: negated, called wrong, or in a clause opening with ``unlike``,
        ``besides``, ``except``, ``between`` or ``among`` ("Unlike Istanbul, Ankara is the capital")."""
        first = next(k for k in range(i + 1) if self.clause[k] == self.clause[i])
        return self.negated(i) or self.called_wrong(end) or self.words[first] in _ASIDE_OPENERS

    def correction_at(self, i: int) -> int:
        """The length of a self-correction marker at word ``i``, else 0: a phrase ("no wait", "i mean", "or
        rather") anywhere; a single word ("no", "wait", "sorry") only where it opens a clause, and a bare "no" only
        when a clause mark follows it ("No, it is Paris", not "No other city")."""
        for p in _CORRECTIONS:
            if not self.starts_with(i, p) or (len(p) == 1 and not self.after_mark[i]):
                continue
            if p == ("no",) and i + 1 < len(self.words) and not self.after_mark[i + 1]:
                continue
            return len(p)
        return 0
