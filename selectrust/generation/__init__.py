"""Generation: the one prompt renderer (``prompts``), the generation backends behind one interface and their
registry (``backends``), and the log that keeps an evaluation's finished generations (``response_log``)."""
