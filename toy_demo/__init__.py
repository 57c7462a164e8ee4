"""The embedded CPU demos in one package (``python recipes/demo.py``; docs/real_model.md, docs/demo.md).

- :mod:`toy_demo.real`, :mod:`toy_demo.real_report`: the real-model demo (the default, ``demo=real``):
  SmolLM2-135M-Instruct on the GeoNames facts set, three DPO arms, their report.

- :mod:`toy_demo.task`: the synthetic key->digit task, its files, and the ``toy:<seed>/<file>`` data
  source (declared in ``pyproject.toml``'s entry-point group ``selectrust.data_sources``); imports only
  ``eval_hooks``. CLI: ``python -m toy_demo.task --out DIR --seed S``.
- :mod:`toy_demo.config`: ``demo_schema``, the schema of ``conf/demo.yaml``.
- :mod:`toy_demo.pipeline`: the toy demo's stages (``demo=toy``), each a real recipe run in-process (a recipe-level orchestrator).
- :mod:`toy_demo.report`: ``report.md``, the plots and the table of a toy demo run.

The trainer, ``eval_hooks`` and ``launch`` never import this package (tests/test_import_rules.py).
"""
