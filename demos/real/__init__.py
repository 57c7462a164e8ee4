"""The real-model demo (``python recipes/demo.py``): its stages (:mod:`demos.real.pipeline`) and report
(:mod:`demos.real.report`)."""
