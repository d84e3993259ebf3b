"""How the workers find each other: the run's store served by the launching kernel (:mod:`.store`), keyed and
sealed between machines (:mod:`.keyed_store`), the port (:mod:`.ports`) and the nodes' heartbeat (:mod:`.heartbeat`)."""
