"""The Slurm placement: one job step (``srun``) across the allocation the kernel runs in, one task per rank.

Slurm does what Slurm is for: placing the tasks on the allocation's nodes (ranks numbered node by node, each GPU the
one Slurm gives its task), carrying the run's payload to every task (the step's stdin: the function and each argument
pickled once, with the run's secret), and cancelling the step (``scancel``). The rest is shared with the Ray placement
(:mod:`notebook_accel.launcher.placement.remote`): each task forks the rank, the rank dials the kernel over the same
authenticated back channel and runs the same worker runtime, and the same watch decides how it ended, so the
dashboard, the output and the errors are a local run's. :mod:`.commands` builds the command and reads Slurm's
variables, :mod:`.task` is a task, :mod:`.step` is the kernel's side of the step, :mod:`.results` answers the watch,
:mod:`.placement` ties it together in the kernel.
"""
