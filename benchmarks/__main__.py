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
    from benchmarks.bench import Command

    # Django's command plumbing gives the option parsing, --traceback and the exit status
    # (CommandError: message on stderr, status 1); "python -m" + "benchmarks" is the usage line.
    Command().run_from_argv(["python -m", "benchmarks", *argv])


if __name__ == "__main__":
    main(sys.argv[1:])
