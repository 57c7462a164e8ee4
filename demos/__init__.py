"""The embedded CPU demos in one package (``python recipes/demo.py``; docs/real_model.md, docs/demo.md).

Each demo is a declared list of stages run by name through the stage runner (``recipes/stages/``), with
the recipes' ``run`` functions handed down by the entry point, so this package never imports ``recipes``.

- :mod:`demos.config`: ``demo_schema``, the schema of ``conf/demo.yaml``.
- :mod:`demos.common`: what both demos share (running the stages, writing the results, a plot).
- :mod:`demos.real`: the real-model demo (the default, ``demo=real``): SmolLM2-135M-Instruct on the GeoNames facts
  set: its arms, one entry each (``arms.py``: stages, label, colour, switch, targets), its stages (``pipeline.py``),
  the GRPO arm's prompts (``prompts.py``), its report (``report.py``) and seed table (``seeds.py``).
- :mod:`demos.toy`: the toy demo (``demo=toy``): the synthetic key->digit task, its files and the
  ``toy:<seed>/<file>`` data source (``task.py``, declared in ``pyproject.toml``'s entry-point group
  ``selectrust.data_sources``; imports only ``eval_hooks``; CLI: ``python -m demos.toy.task --out DIR --seed S``),
  its stages (``pipeline.py``) and its report (``report.py``).

The trainer, ``eval_hooks``, ``launch`` and ``recipes`` (but for ``recipes/demo.py``) never import this package
(tests/repo/test_import_rules.py).
"""
