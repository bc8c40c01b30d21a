import os

from celery import Celery
from celery.signals import worker_process_init, worker_process_shutdown

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "riverapp.settings")

app = Celery("riverapp")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_process_init.connect
def _host_runs_in_this_process(**kwargs) -> None:
    """Each worker process borrows its database connections from a pool and hosts many run
    segments on its own event loop (executions.runhost)."""
    from common.dbpool import worker_pool_enable
    from executions.runhost import run_host_enable

    worker_pool_enable()
    run_host_enable()


@worker_process_shutdown.connect
def _hand_back_hosted_runs(**kwargs) -> None:
    """A stopping worker process hands its unfinished hosted runs back to the queue."""
    from executions.runhost import run_host_shutdown

    run_host_shutdown()
