#!/usr/bin/env python
import os
import sys


def main():
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "riverapp.settings")
    if sys.argv[1:2] == ["runriver"]:
        # runriver serves the web: it borrows database connections from a pool, as
        # riverapp/asgi.py does (see riverapp/settings.py).
        os.environ.setdefault("RIVER_DB_POOL", "true")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
