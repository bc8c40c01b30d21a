#!/usr/bin/env python
import os
import sys


def main():
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "riverapp.settings")
    if sys.argv[1:2] == ["runriver"]:
        # runriver serves the web: it borrows database connections from a pool, as
        # riverapp/asgi.py does (see riverapp/settings.py). Its embedded worker threads
        # share that pool (a running segment holds up to three: its own, its lease
        # heartbeat's and its tool thread's), so the default is larger here.
        os.environ.setdefault("RIVER_DB_POOL", "true")
        os.environ.setdefault("RIVER_DB_POOL_MAX_SIZE", "25")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
