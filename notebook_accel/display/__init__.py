"""Where a run's events go: the sink seam, the console backend, and the launch's own status lines.

:mod:`.sinks` chooses the sink once per run (the dashboard in a Jupyter kernel with ipywidgets, else the console)
and shields the launcher from a faulty one; :mod:`.console` is the plain-text backend (the notebook backend is the
dashboard in ``notebook_accel.widgets``); :mod:`.phases` tells the sink what the launch is doing before the workers
can speak; :mod:`.flush` hands the kernel's streams to its IO thread without waiting. Nothing here imports widgets.
"""
