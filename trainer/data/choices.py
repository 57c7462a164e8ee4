"""The value sets of the data settings (standard library only), read by the data loaders that act on
them (:mod:`trainer.data.train_data`) and by the config schemas (:mod:`trainer.config.choices`)."""

#: data.truncation: what happens to an over-long example (apply_length_policy).
TRUNCATIONS = ("keep_end", "keep_start", "drop", "error")
#: data.on_invalid: what happens to an invalid example (load_pairs).
ON_INVALID = ("drop", "error")
#: algo.weighting: how ConditionSampler applies the condition masses.
WEIGHTINGS = ("sample", "loss")
