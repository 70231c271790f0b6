"""Capacity planning: sweeps as independent tasks, the search for the most load within an SLO,
and the cost of a configuration."""
