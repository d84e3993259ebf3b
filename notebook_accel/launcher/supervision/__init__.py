"""Watching a started run until it ends: one event loop over the workers' pipes and exits, their output and log
files, the errors a run ends with, and the background handle of ``block=False``."""
