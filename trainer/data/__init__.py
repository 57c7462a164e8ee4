"""Training data: pair and SFT loaders and samplers (``train_data``), SCOPE pair mining (``mining``), SFT
tokenisation (``sft_data``), named data sources (``sources``) and the data settings' value sets (``choices``,
standard library only)."""
