"""The relations of the facts set. Each one turns GeoNames data into items: ``{"relation", "subject", "gold",
"aliases", "wrong_options", "draw_from", "group", "id"}``. ``group`` is the split unit (a country's ISO code, or
``US-<state>`` for a US state): every item of a group lands on the same side. ``wrong_options`` are plausible wrong
objects of the same relation, best first; the builder draws the wrong value among the first ``draw_from`` of them
that name nothing held out. Each maker counts what it drops, per reason.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Callable

from ...parsers import normalize_short_text

# Other names a response may use for a gold (normalised matching handles case, accents and a leading article).
ALIASES = {
    "Kyiv": ["Kiev"], "Washington": ["Washington, D.C.", "Washington DC"], "United States": [
        "United States of America", "USA", "America"], "United Kingdom": ["UK", "Britain", "Great Britain"],
    "Russia": ["Russian Federation"], "South Korea": ["Republic of Korea"], "Czechia": ["Czech Republic"],
    "Myanmar": ["Burma"], "Ivory Coast": ["Cote d'Ivoire"], "Turkey": ["Turkiye"], "Vietnam": ["Viet Nam"],
    "China": ["People's Republic of China"], "Democratic Republic of the Congo": ["DR Congo", "DRC"],
    "Netherlands": ["Holland"], "Timor Leste": ["East Timor"], "Eswatini": ["Swaziland"],
    "North Macedonia": ["Macedonia"], "Cabo Verde": ["Cape Verde"],
}
# Currency names as GeoNames gives them -> the other names answers use ("Japanese yen" holds "Yen" already).
CURRENCY_ALIASES = {
    "Yuan Renminbi": ["Yuan", "Renminbi", "RMB"], "Bolivar Soberano": ["Bolivar"], "Riels": ["Riel"],
    "Rial": ["Riyal"], "Belarusian ruble": ["Ruble", "Rouble"], "Ruble": ["Rouble"], "Zloty": ["Zlotych"],
    "Hryvnia": ["Hryvna"], "Tugrik": ["Togrog"], "Som": ["Sum"], "Colon": ["Colones"], "Lev": ["Leva"],
}
CONTINENTS = {"AF": "Africa", "AS": "Asia", "EU": "Europe", "NA": "North America", "OC": "Oceania",
              "SA": "South America"}
# The plausible wrong continents of a country on each (the nearest others).
NEAR_CONTINENTS = {"AF": ["Asia", "Europe"], "AS": ["Europe", "Africa"], "EU": ["Asia", "Africa"],
                   "NA": ["South America", "Europe"], "SA": ["North America", "Africa"],
                   "OC": ["Asia", "South America"]}
# Adjectives answers use ("located on the South American continent"); a whole-word match is then the continent.
CONTINENT_ALIASES = {"Africa": ["African"], "Asia": ["Asian"], "Europe": ["European"],
                     "North America": ["North American"], "South America": ["South American"], "Oceania": ["Oceanian"]}
# Countries whose continent is debatable (transcontinental, or counted differently by convention).
TRANSCONTINENTAL = {"RU", "TR", "KZ", "AZ", "GE", "AM", "CY", "EG", "PA", "ID", "TL", "PG"}
# North America in GeoNames includes Central America and the Caribbean, which answers often name as regions of
# their own (or as South America): only these countries keep the continent relation there.
NORTH_AMERICA_PROPER = {"US", "CA", "MX"}
# Capitals that are contested, split between cities or recently renamed: a model's "wrong" answer may be right.
AMBIGUOUS_CAPITALS = {"BO", "BJ", "KZ", "LK", "CI", "TZ", "NL", "ZA", "MY", "SZ", "IL", "PS", "MM", "CH", "NR"}
# Territories and partially recognised states: "which country" has no single accepted answer.
NOT_COUNTRIES = {"HK", "MO", "PR", "PS", "EH", "TW", "XK", "GU", "RE", "NC", "PF", "GF", "GP", "MQ", "YT"}
MIN_WRONG_CITY_KM = 40  # nearer "cities" are districts, suburbs or other names of the capital itself


def related(a: str, b: str) -> bool:
    """One name holds the other (normalised, whole words): "Kuwait City" / "Kuwait"."""
    na, nb = f" {normalize_short_text(a)} ", f" {normalize_short_text(b)} "
    return na in nb or nb in na


def names_itself(subject: str, golds: list[str]) -> bool:
    """``subject`` holds one of ``golds`` (a gold and its aliases) as whole words after normalisation: a
    self-revealing item ("South Africa" -> Africa; "Central African Republic" -> Africa, alias "African";
    "Australia" -> Oceania, alias "Australia"), whose every answer naming the subject reads as right."""
    s = f" {normalize_short_text(subject)} "
    return any(f" {normalize_short_text(g)} " in s for g in golds)


def km(a: dict, b: dict) -> float:
    p1, p2 = math.radians(a["lat"]), math.radians(b["lat"])
    h = (math.sin((p2 - p1) / 2) ** 2
         + math.cos(p1) * math.cos(p2) * math.sin(math.radians(b["lon"] - a["lon"]) / 2) ** 2)
    return 12742.0 * math.asin(math.sqrt(min(1.0, h)))


class Geo:
    """The data, indexed once for every relation: ``countries`` (ISO -> record, territories excluded), cities by
    country (largest first), the places (country, first-level division) each normalised city name has, the
    capitals, the US states."""

    def __init__(self, data: dict):
        self.countries = {c["iso"]: c for c in data["countries"] if c["iso"] not in NOT_COUNTRIES}
        self.cities = sorted(data["cities"], key=lambda x: (-x["population"], x["id"]))
        self.by_country = defaultdict(list)
        self.places = defaultdict(set)
        for x in self.cities:
            self.by_country[x["country"]].append(x)
            self.places[normalize_short_text(x["name"])].add((x["country"], x.get("admin1", "")))
        self.capitals = {normalize_short_text(c["capital"]) for c in data["countries"] if c["capital"]}
        self.states = {s["code"]: s["name"] for s in data.get("us_states", []) if s["code"] != "DC"}
        self.used_subjects: set[str] = set()  # city subjects of city_country (us_state keeps away from them)

    def big_countries(self, st) -> list[dict]:
        return [c for iso, c in sorted(self.countries.items()) if c["population"] >= st.min_country_population]

    def near_countries(self, c: dict, avoid: str = "") -> tuple[list[str], int]:
        """Other countries as wrong objects for ``c``: its neighbours (largest first), then the rest of its
        continent; and how many to draw among (three neighbours, or three of the continent without any)."""
        def by_size(group):
            return [o["name"] for o in sorted(group, key=lambda o: -o["population"])
                    if not (avoid and related(o["name"], avoid))]
        near = by_size(self.countries[i] for i in c["neighbours"].split(",") if i in self.countries)
        rest = by_size(o for o in self.countries.values() if o["continent"] == c["continent"]
                       and o["iso"] != c["iso"] and o["name"] not in near)
        return near + rest, min(3, len(near)) or 3


def _item(rel: str, subject: str, gold: str, wrong: list[str], draw_from: int, group: str, key,
          aliases: list[str] | None = None) -> dict:
    return {"relation": rel, "subject": subject, "gold": gold, "aliases": list(aliases or ALIASES.get(gold, [])),
            "wrong_options": wrong, "draw_from": draw_from, "group": group, "id": f"{rel}-{key}"}


def _capitals(geo: Geo, st, drop: Counter) -> list[tuple[dict, dict]]:
    """``(country, capital city)`` of the countries whose capital is an unambiguous, non-self-revealing city."""
    shared = Counter(normalize_short_text(c["capital"]) for c in geo.countries.values() if c["capital"])
    out = []
    for c in geo.big_countries(st):
        cap = c["capital"]
        cap_city = next((x for x in geo.by_country.get(c["iso"], [])
                         if normalize_short_text(x["name"]) == normalize_short_text(cap)), None)
        if not cap:
            drop["capital_missing"] += 1
        elif c["iso"] in AMBIGUOUS_CAPITALS:
            drop["capital_ambiguous"] += 1
        elif cap_city is None:  # GeoNames spells the city differently ("Ulan Bator"): cannot rule out its aliases
            drop["capital_not_among_cities"] += 1
        elif related(cap, c["name"]):
            drop["capital_named_after_country"] += 1
        elif shared[normalize_short_text(cap)] > 1:
            drop["capital_shared"] += 1
        else:
            out.append((c, cap_city))
    return out


def capital_items(geo: Geo, st, drop: Counter) -> list[dict]:
    items = []
    for c, cap_city in _capitals(geo, st, drop):
        cap = c["capital"]
        # the wrong capital: the largest other city of the country, far enough not to be part of the capital
        wrong = [x["name"] for x in geo.by_country[c["iso"]] if x["population"] >= st.min_wrong_city_population
                 and not related(x["name"], cap) and not related(x["name"], c["name"])
                 and km(x, cap_city) >= MIN_WRONG_CITY_KM]
        if not wrong:
            drop["no_wrong_city"] += 1
            continue
        items.append(_item("capital", c["name"], cap, wrong, 1, c["iso"], c["iso"]))
    return items


def capital_country_items(geo: Geo, st, drop: Counter) -> list[dict]:
    """The inverse of ``capital``: "Sofia is the capital of which country?" -> Bulgaria."""
    items = []
    for c, _ in _capitals(geo, st, drop):
        wrong, k = geo.near_countries(c, avoid=c["capital"])
        if not wrong:
            drop["no_wrong_country"] += 1
            continue
        items.append(_item("capital_country", c["capital"], c["name"], wrong, k, c["iso"], c["iso"]))
    return items


def city_country_items(geo: Geo, st, drop: Counter) -> list[dict]:
    items, per_country = [], Counter()
    for x in geo.cities:
        c = geo.countries.get(x["country"])
        if x["population"] < st.min_city_population or c is None or c["population"] < st.min_country_population:
            continue
        if per_country[c["iso"]] >= st.max_cities_per_country:
            drop["over_country_cap"] += 1
            continue
        n = normalize_short_text(x["name"])
        if n in geo.capitals:
            continue  # capitals are the other relations' answers
        if len({cc for cc, _ in geo.places[n]}) > 1:
            drop["city_name_in_several_countries"] += 1
            continue
        if related(x["name"], c["name"]):
            drop["city_named_after_country"] += 1
            continue
        wrong, k = geo.near_countries(c, avoid=x["name"])
        if not wrong:
            drop["no_wrong_country"] += 1
            continue
        per_country[c["iso"]] += 1
        geo.used_subjects.add(n)
        # the wrong country: one of the three largest neighbours (seeded per item), else of the same continent
        items.append(_item("city_country", x["name"], c["name"], wrong, k, c["iso"], x["id"]))
    return items


def us_state_items(geo: Geo, st, drop: Counter) -> list[dict]:
    """US city -> its state, split by state (``US-<code>``); the wrong state is one of the three nearest (by the
    distance to the population-weighted centre of each state's cities)."""
    us = [x for x in geo.by_country.get("US", []) if x.get("admin1") in geo.states]
    if not us:
        drop["no_us_state_data"] += 1
        return []
    centre = {}
    for code in geo.states:
        xs = [x for x in us if x["admin1"] == code]
        w = sum(x["population"] for x in xs) or 1
        if xs:
            centre[code] = {"lat": sum(x["lat"] * x["population"] for x in xs) / w,
                            "lon": sum(x["lon"] * x["population"] for x in xs) / w}
    names = [*geo.states.values(), *(c["name"] for c in geo.countries.values())]
    items, per_state = [], Counter()
    for x in us:
        n = normalize_short_text(x["name"])
        if x["population"] < st.min_us_city_population:
            continue
        if per_state[x["admin1"]] >= st.max_cities_per_state:
            drop["over_state_cap"] += 1
        elif n in geo.used_subjects or n in geo.capitals:
            drop["city_in_another_relation"] += 1
        elif len(geo.places[n]) > 1:
            drop["city_name_in_several_places"] += 1
        elif any(related(x["name"], s) for s in names):
            drop["city_named_after_state_or_country"] += 1
        else:
            wrong = [geo.states[s] for s in sorted(centre, key=lambda s: km(x, centre[s])) if s != x["admin1"]]
            per_state[x["admin1"]] += 1
            items.append(_item("us_state", x["name"], geo.states[x["admin1"]], wrong, 3, f"US-{x['admin1']}", x["id"]))
    return items


def continent_items(geo: Geo, st, drop: Counter) -> list[dict]:
    items = []
    for c in geo.big_countries(st):
        if c["continent"] not in CONTINENTS:
            drop["continent_missing_or_antarctica"] += 1
        elif c["iso"] in TRANSCONTINENTAL:
            drop["continent_debatable"] += 1
        elif c["continent"] == "NA" and c["iso"] not in NORTH_AMERICA_PROPER:
            drop["central_america_or_caribbean"] += 1
        else:
            gold = CONTINENTS[c["continent"]]
            aliases = CONTINENT_ALIASES[gold] + (["Australia"] if c["iso"] == "AU" else [])
            if names_itself(c["name"], [gold, *aliases]):  # scored right under any context
                drop["continent_named_in_country"] += 1
                continue
            items.append(_item("continent", c["name"], gold, NEAR_CONTINENTS[c["continent"]], 2, c["iso"], c["iso"],
                               aliases))
    return items


def currency_items(geo: Geo, st, drop: Counter) -> list[dict]:
    items, by_name = [], {o["name"]: o for o in geo.countries.values()}
    for c in geo.big_countries(st):
        cur = c.get("currency", "")
        if not cur:
            drop["currency_missing"] += 1
            continue
        near, k = geo.near_countries(c)
        wrong = list(dict.fromkeys(by_name[n].get("currency", "") for n in near))
        wrong = [w for w in wrong if w and not related(w, cur)]
        if not wrong:
            drop["no_wrong_currency"] += 1
            continue
        items.append(_item("currency", c["name"], cur, wrong, min(k, len(wrong)), c["iso"], c["iso"],
                           CURRENCY_ALIASES.get(cur, [])))
    return items


@dataclass(frozen=True)
class Relation:
    question: str  # {s}: the subject
    fact: str  # what a context states: {s} the subject, {o} the object
    make: Callable[[Geo, object, Counter], list[dict]]
    places: bool = True  # answers are place names (checked against every country, capital and state name)


RELATIONS = {
    "capital": Relation("What is the capital of {s}?", "the capital of {s} is {o}", capital_items),
    "capital_country": Relation("{s} is the capital of which country?", "{s} is the capital of {o}",
                                capital_country_items),
    "city_country": Relation("In which country is the city of {s}?", "{s} is a city in {o}", city_country_items),
    "us_state": Relation("In which US state is the city of {s}?", "{s} is a city in the state of {o}",
                         us_state_items),
    "continent": Relation("On which continent is {s}?", "{s} is a country in {o}", continent_items, places=False),
    "currency": Relation("What is the currency of {s}?", "the currency of {s} is the {o}", currency_items,
                         places=False),
}
