"""The replica runtime: K workers on a leading array axis mapped onto a device
mesh (``replicas``), the run state (``state``), the inner loop with a traced
step count (``inner``), the round's statistics (``signals``), the contract every
algorithm fills (``contract``, ``jitting``) and the round driver (``rounds``).
Imports nothing else of the package."""
