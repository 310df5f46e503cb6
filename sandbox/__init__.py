"""Stockade's isolation primitives: the namespaced virtual filesystem and the process sandbox.

This package imports nothing from ``engine`` or ``policies``. It is empty until the virtual
filesystem lands; until then the engine's tools have no file access of their own.
"""
