"""The error an adapter raises when its framework is not installed, naming the extra to install.

Usage (at the top of an adapter module)::

    try:
        import langchain_core
    except ImportError as exc:
        raise MissingExtraError.of("langchain", "langchain_core") from exc
"""

from __future__ import annotations

from stockade.errors import StockadeError


class MissingExtraError(StockadeError, ImportError):
    """An adapter's framework is not installed; the message says which extra installs it. (An
    `ImportError` too, so code that imports adapters optionally keeps working.)"""

    @classmethod
    def of(cls, extra: str, module: str) -> MissingExtraError:
        """The error for an adapter whose framework (imported as ``module``) comes with the
        optional dependency group ``extra``."""
        return cls(
            f"this Stockade adapter needs the {module!r} package, which is not installed; "
            f"install it with: pip install 'stockade[{extra}]'",
            name=module,
        )
