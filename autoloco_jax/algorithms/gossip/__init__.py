"""The gossip family: no all-reduce, each worker mixes with its neighbours on a
topology (NoLoCo, GASLoC)."""
