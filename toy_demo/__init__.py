"""The embedded CPU demo in one package (``python recipes/demo.py``; docs/demo.md).

- :mod:`toy_demo.task`: the synthetic key->digit task, its files, and the ``toy:<seed>/<file>`` data
  source (declared in ``pyproject.toml``'s entry-point group ``selectrust.data_sources``); imports only
  ``eval_hooks``. CLI: ``python -m toy_demo.task --out DIR --seed S``.
- :mod:`toy_demo.config`: ``demo_schema``, the schema of ``conf/demo.yaml``.
- :mod:`toy_demo.pipeline`: the stages, each a real recipe run in-process (a recipe-level orchestrator).
- :mod:`toy_demo.report`: ``report.md``, the plots and the table of a demo run.

The trainer, ``eval_hooks`` and ``launch`` never import this package (tests/test_import_rules.py).
"""
