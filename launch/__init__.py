"""Launchers run from a checkout (``python launch/<script>.py``): the multi-node launcher, the sweep launcher and its
``sweeper`` package, the vLLM server launcher; their accelerate/DeepSpeed configs beside them. A regular package (not
a namespace one), so ``launch.sweeper`` never merges with another distribution's ``launch``."""
