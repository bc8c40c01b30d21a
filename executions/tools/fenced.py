"""Write tools whose changes land in River's own database commit through the call's fence.

The engine abandons a tool at its timeout and closes the call's write fence
(rivercore.fence). A tool that writes River rows (a data source, a policy) runs its
handler in one transaction here and commits it only while the fence is open, so a
handler that overran its timeout leaves nothing behind. ``write_back`` does not need
this: its rows are in the customer's database, whose connector commits through the
same fence itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db import transaction

from rivercore.fence import FenceClosed, current_fence
from rivercore.tools import ToolContext, ToolError, ToolErrorKind


def fenced_in_transaction(handler: Callable[[ToolContext, Any], Any]) -> Callable[[ToolContext, Any], Any]:
    def run(ctx: ToolContext, args: Any) -> Any:
        fence = current_fence()
        if fence is None:  # called outside the engine (a test, a shell): nothing to fence
            return handler(ctx, args)
        block = transaction.atomic()
        block.__enter__()
        committing = False
        try:
            result = handler(ctx, args)
            with fence.commit():
                committing = True
                block.__exit__(None, None, None)  # COMMIT, while the fence is held open
            return result
        except BaseException as exc:
            if not committing:
                block.__exit__(type(exc), exc, exc.__traceback__)  # ROLLBACK
            if isinstance(exc, FenceClosed):
                raise ToolError(ToolErrorKind.TIMEOUT, str(exc)) from None
            raise

    run.__name__ = getattr(handler, "__name__", "fenced_handler")
    run.__doc__ = handler.__doc__
    run.__wrapped_handler__ = handler  # type: ignore[attr-defined]
    return run
