"""Where the workers run: forked from this process (:mod:`.spawn`, with :mod:`.processes` to know when each
ended and to end what it started), or, for one process, in this process itself (:mod:`.inprocess`)."""
