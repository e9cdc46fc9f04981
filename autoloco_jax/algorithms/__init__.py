"""The training algorithms on the replica runtime: the DiLoCo family
(``diloco/``: DiLoCo, AutoLoCo, their outer step, interval controllers and
streaming syncs), the gossip family (``gossip/``: NoLoCo, GASLoC, topologies)
and DDP; ``registry`` picks one by ``config.algorithm``. Imports the runtime,
compression and ``outer``."""
