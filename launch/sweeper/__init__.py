"""The sweep launcher's parts; ``launch/sweep.py`` is its command line (launch/README.md, "Sweeps").

``jobs`` (a job, its run directory's files, its status), ``naming`` (job names from swept values), ``grid``
(Hydra sweep syntax to the cartesian product of jobs and their commands), ``local`` (run the jobs one after
another here), ``slurm`` (write a SLURM array script), ``summary`` (``summary.md`` and ``summary.csv``).
None of them imports torch; ``grid`` needs hydra-core for the override grammar.
"""
