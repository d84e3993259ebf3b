"""What the placements that run ranks on other machines share (Ray's actors, Slurm's tasks): the authenticated back
channel to the kernel (:mod:`.link`, and the rank's side of it, :mod:`.dial`), the rank's forked process
(:mod:`.rank`) and its control stream (:mod:`.control`), this machine's address and the network interface its
collectives use (:mod:`.interface`), the kernel's handle of a rank (:mod:`.handles`), the watch that decides when and
why a rank ended (:mod:`.watch`) and the system sampler it feeds (:mod:`.sampler`), the pickling of the function and
its arguments with its refusal (:mod:`.payload`, :mod:`.pickling`), and the registry that keeps warm workers for the
next launch (:mod:`.keep`). A placement brings only what is its own: how ranks are placed and started, how their
results come back, and its words; it imports from here, never from another placement.
"""
