"""The Ray placement: one actor per rank on a Ray cluster, driven from the kernel like forked workers.

Ray does what Ray is for: reserving every worker at once (a placement group), shipping the notebook's function and
arguments (cloudpickle, the object store), and ending a dead driver's actors. The rest is the launcher's own, so a
run on a cluster looks like a local one: each actor connects back to the kernel over four authenticated TCP
streams, runs the same worker runtime as a forked child (:mod:`.actor`), and the kernel watches them through
handles of the local fork's shape (:mod:`.watch`); those parts are shared with the Slurm placement
(:mod:`notebook_accel.launcher.placement.remote`), so the supervisor, the sinks and the errors are the ones of a
local run. :mod:`.reserve` connects and reserves; :mod:`.placement` ties it together.
"""
