"""The Slurm backend: everything that talks to Slurm (a plug-in, :class:`.backend.SlurmBackend`).

The controller as a requeueable batch job (:mod:`.controller_job`), workers as job arrays
through submitit (:mod:`.executor`), curve fits as job arrays (:mod:`.curve_fits`), the
``[slurm]`` section (:mod:`.options`) and its changes (:mod:`.settings`), what the cluster
allows (:mod:`.cluster`), job states (:mod:`.queue`), ``status`` and ``sacct``
(:mod:`.status`, :mod:`.accounting`), the jobs' environment (:mod:`.environment`). Nothing
outside this package imports it: hpctune finds it by name (:mod:`hpctune.plugins`).
"""
