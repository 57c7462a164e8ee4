"""The toy demo (``python recipes/demo.py demo=toy``): the toy task and its data source (:mod:`demos.toy.task`),
the stages (:mod:`demos.toy.pipeline`) and the report (:mod:`demos.toy.report`)."""
