"""The simulation: the network, the simulated clock of every run, the planner
that replays it at any size, and injected faults. Imports the layers below it."""
