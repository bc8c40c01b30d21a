import os

from celery import Celery
from celery.signals import worker_process_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "riverapp.settings")

app = Celery("riverapp")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_process_init.connect
def _host_runs_in_this_process(**kwargs) -> None:
    """Each worker process hosts many run segments on its own event loop (executions.runhost)."""
    from executions.runhost import run_host_enable

    run_host_enable()
