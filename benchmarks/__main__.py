"""``python -m benchmarks [options]``: River's benchmark, with River's settings
(``DJANGO_SETTINGS_MODULE``, ``riverapp.settings`` unless set). ``--help`` lists the
options; ``make bench ARGS=...`` passes them on."""

from __future__ import annotations

import os
import sys


def main(argv: list[str]) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "riverapp.settings")
    import django

    django.setup()
    _turn_lines_discarded()
    from benchmarks.bench import Command

    # Django's command plumbing gives the option parsing, --traceback and the exit status
    # (CommandError: message on stderr, status 1); "python -m" + "benchmarks" is the usage line.
    Command().run_from_argv(["python -m", "benchmarks", *argv])


def _turn_lines_discarded() -> None:
    """The engine's per-turn log lines (``river.turns``, one JSON object a turn at the
    default ``LOG_LEVEL``) are still formatted and redacted, as in production, so their
    CPU stays in the figures, but written to the null device instead of among the report's
    lines."""
    import logging

    from telemetry.logs import TURN_LOGGER

    for handler in logging.getLogger(TURN_LOGGER).handlers:
        if isinstance(handler, logging.StreamHandler):
            handler.setStream(open(os.devnull, "w"))  # noqa: SIM115 - for the life of the process


if __name__ == "__main__":
    main(sys.argv[1:])
