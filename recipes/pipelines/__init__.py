"""The distillation pipelines behind ``python recipes/distill.py``: ``taste_distill`` (``pipeline.kind=taste``) and
``opsd`` (``pipeline.kind=opsd``). Each is a declared list of stages run by the stage runner (``recipes/stages/``),
so they sit above the recipes they run, beside it; the distillation trainer itself (its views, step and
evaluation) is ``trainer/distill/``."""
