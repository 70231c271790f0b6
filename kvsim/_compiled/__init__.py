"""Compiled copies of the kernel modules (built by ``setup.py``; see :mod:`kvsim.backend`).

Empty in a source checkout until ``pip install`` builds them; never edited by hand.
"""
