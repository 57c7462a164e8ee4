"""What the trainers' data shares: the samplers and the one length policy (``train_data``), SCOPE pair mining
(``mining``), the data pins (``pins``) and the data settings' value sets (``choices``, standard library only). Each
trainer's own rows are in its package (``trainer/dpo/data.py``, ``trainer/sft/data.py``, ...)."""
