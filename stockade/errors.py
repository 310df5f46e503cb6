"""The root of every exception Stockade raises on purpose.

It lives here, above the three packages, because `policies`, `sandbox` and `engine` each raise
errors of their own and none of them may import another's: each derives its errors from this
one class, so ``except StockadeError`` catches whatever Stockade meant to raise.
"""

from __future__ import annotations


class StockadeError(Exception):
    """Base class of every exception Stockade raises on purpose."""


class ConfigurationError(StockadeError, ValueError):
    """A setting, option or argument given to Stockade cannot be used; the message says which,
    and what to give instead. (Also a `ValueError`, as it always was.)"""
