"""Entry points, one file each: ``run(cfg)`` does the work and ``main`` is its ``@hydra.main``.

``python recipes/<name>.py key=value ...`` runs one from the command line; orchestrators (the demo, the
stage runner in ``recipes/chain.py``) and tests call ``recipes.<name>.run(cfg)`` with a composed config.
Nothing below this package (``trainer``, ``eval_hooks``, ``launch``) imports it.
"""
