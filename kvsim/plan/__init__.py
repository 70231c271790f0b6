"""Capacity planning: sweeps over candidate configurations and the cost model."""
