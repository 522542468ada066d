"""What every `with` and `async with` block of the client shares: leaving
it is `_leave(exc_type)`, whatever the block raised.

The stores, holds and campaigns (and their blocking twins) each say only
what leaving does; the context-manager protocol is written here once.
"""

import abc
from types import TracebackType
from typing import Optional, Type


class AsyncBlock(abc.ABC):
    """An `async with` block whose leaving is `_leave`."""

    @abc.abstractmethod
    async def _leave(self, exc_type: Optional[Type[BaseException]]) -> None:
        """Leaves the block; `exc_type` is what the block raised, or None."""

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        await self._leave(exc_type)


class Block(abc.ABC):
    """A `with` block whose leaving is `_leave`."""

    @abc.abstractmethod
    def _leave(self, exc_type: Optional[Type[BaseException]]) -> None:
        """Leaves the block; `exc_type` is what the block raised, or None."""

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self._leave(exc_type)
