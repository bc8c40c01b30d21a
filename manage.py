#!/usr/bin/env python
import os
import sys


def main():
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "riverapp.settings")
    if sys.argv[1:2] == ["runriver"]:
        # runriver serves the web: it borrows database connections from a pool, as
        # riverapp/asgi.py does (see riverapp/settings.py). Its embedded worker's
        # threads, its run host's I/O threads and its tool calls share that pool with
        # the web, so the default is twice a web process's.
        os.environ.setdefault("RIVER_DB_POOL", "true")
        os.environ.setdefault("RIVER_DB_POOL_MAX_SIZE", "8")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
