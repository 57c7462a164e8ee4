"""The foundation every other package builds on: reading and writing records (``io``, ``hf_data``,
``dataset_ids``), the input-data error (``errors``), typed settings (``settings``), named-component registries
(``plugins``) and the one file and directory hasher (``hashing``). Nothing here imports another part of
``eval_hooks`` outside ``core``; heavy libraries (``datasets``, ``pyarrow``) load inside the functions that use
them."""
