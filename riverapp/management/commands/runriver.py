"""``manage.py runriver``: River in one process (HTTP, WebSocket, worker and beat)."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import connection

from riverapp import embedded

DEMO_ADMIN = "admin"
DEMO_APPROVER = "approver"


class Command(BaseCommand):
    help = "Serve River (Daphne) with an embedded Celery worker and beat in the same process."

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument(
            "--no-worker",
            action="store_true",
            help="serve only, no worker and no beat: run `celery -A riverapp worker` and `beat` (needs REDIS_URL)",
        )
        parser.add_argument(
            "--no-beat",
            action="store_true",
            help="run the embedded worker but no beat, when another process runs beat (needs REDIS_URL)",
        )
        parser.add_argument("--concurrency", type=int, default=4, help="worker threads (default 4)")

    def handle(self, *args, host, port, no_worker, no_beat, concurrency, **options):
        if (no_worker or no_beat) and settings.EMBEDDED:
            raise CommandError(
                f"{'--no-worker' if no_worker else '--no-beat'} needs REDIS_URL: without it the broker lives "
                "in this process, so no other process could run or schedule the tasks."
            )
        if concurrency < 1:
            raise CommandError("--concurrency must be at least 1.")
        self.check(display_num_errors=False)
        from telemetry.metrics import metrics_dir_prepare

        metrics_dir_prepare()  # marks dead processes dead and merges their files; never touches a live one's
        shown_host = f"[{host}]" if ":" in host else host
        url = f"http://{shown_host}:{port}/"
        broker = "in-memory broker and channel layer" if settings.EMBEDDED else "Redis broker and channel layer"
        mode = f"{connection.vendor} database, {broker}"
        has_admin = get_user_model().objects.filter(username=DEMO_ADMIN).exists()
        has_approver = get_user_model().objects.filter(username=DEMO_APPROVER).exists()

        def announce():
            background = "off" if no_worker else ("worker on, beat off" if no_beat else "on")
            self.say(f"River is running at {url} ({mode}; worker and beat: {background})")
            if has_admin:
                self.say(
                    f"Sign in at {url}accounts/login/ as {DEMO_ADMIN!r} with the password seed_demo printed "
                    "when it created the account (or RIVER_ADMIN_PASSWORD)."
                )
            if has_approver:
                self.say(
                    f"Approve the admin's runs as {DEMO_APPROVER!r} (password printed by seed_demo, or "
                    f"RIVER_APPROVER_PASSWORD) at {url}approvals/: whoever starts a run may not approve it."
                )
            self.say("Stop with Ctrl-C.")
            self.stdout.flush()

        try:
            embedded.serve(
                host=host,
                port=port,
                worker=not no_worker,
                beat=not (no_worker or no_beat),
                concurrency=concurrency,
                on_ready=announce,
            )
        except embedded.ListenFailed as exc:
            raise CommandError(str(exc)) from None
        self.say("River stopped.")

    def say(self, text: str) -> None:
        """A line for the operator: plain, or a JSON object with ``RIVER_LOG_FORMAT=json``."""
        if settings.RIVER_LOG_FORMAT == "json":
            from telemetry.logs import json_line

            text = json_line(logger="river.server", message=text)
        self.stdout.write(text)
