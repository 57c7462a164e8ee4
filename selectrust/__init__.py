"""selectrust's foundation: what both training (``trainer``) and evaluation (``eval_hooks``) stand on.

- ``selectrust.core``: records in and out (``io``, ``hf_data``, ``dataset_ids``), the input-data error, typed settings,
  the one :class:`~selectrust.core.plugins.Registry` of named components, hashing;
- ``selectrust.model``: where a model comes from (directories, hub ids, tiny presets, GGUF files and packages), the
  checked on-disk cache, precision, loading, adapters, the training policy and its reference, merged-LoRA generation;
- ``selectrust.generation``: the one prompt renderer, the generation backends behind one interface, the response log.

Nothing here imports ``trainer``, ``eval_hooks``, ``recipes``, ``demos`` or ``launch`` (``tests/repo/test_import_rules.py``).
``import selectrust`` stays light: torch and transformers load when a model is asked for.
"""

from selectrust.moved import install as _install_moved

_install_moved()  # old import paths (eval_hooks.core, trainer.dpo_losses, ...) name their new home: selectrust/moved.py
