"""selectrust training: recipes' machinery (config, core loop, algorithms, data, RL, distillation)."""

import selectrust  # noqa: F401,E402 - installs the pointers of old import paths (selectrust/moved.py)
