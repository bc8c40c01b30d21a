import os

from celery import Celery
from celery.signals import setup_logging, worker_init, worker_process_init, worker_process_shutdown

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "riverapp.settings")

app = Celery("riverapp")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@setup_logging.connect
def _river_logging(loglevel=None, **kwargs) -> None:
    """Workers keep River's LOGGING (format switch and secret redaction) instead of
    Celery replacing the root handlers with its own. Celery's own loggers log at the
    level the command asked for (``celery worker -l info``), whatever ``LOG_LEVEL`` is:
    its startup lines ("... ready.") are how operators and scripts see a worker come up."""
    import logging.config

    from django.conf import settings

    logging.config.dictConfig(settings.LOGGING)
    if loglevel:
        logging.getLogger("celery").setLevel(loglevel)


@worker_process_init.connect
def _host_runs_in_this_process(**kwargs) -> None:
    """Each worker process borrows its database connections from a pool and hosts many run
    segments on its own event loop (executions.runhost)."""
    from common.dbpool import worker_pool_enable
    from executions.runhost import run_host_enable

    if worker_pool_enable():
        _pool_kept_across_tasks()
    run_host_enable()


def _pool_kept_across_tasks() -> None:
    """Celery's Django fixup closes every connection, and with a pool the whole pool,
    before and after each task. In a process that hosts runs that would close the pool
    under the host's I/O threads mid-statement. Instead, after each task its thread
    hands back the connection it borrowed (the pool stays)."""
    from celery.signals import task_postrun, task_prerun

    for fixup in getattr(app, "_fixups", ()):
        worker = getattr(fixup, "_worker_fixup", None)
        if worker is not None:
            task_prerun.disconnect(worker.on_task_prerun)
            task_postrun.disconnect(worker.on_task_postrun)
    task_postrun.connect(_task_connection_back, weak=False)


def _task_connection_back(**kwargs) -> None:
    from django.db import connections

    for conn in connections.all(initialized_only=True):
        if not conn.in_atomic_block:
            conn.close()


@worker_process_shutdown.connect
def _hand_back_hosted_runs(**kwargs) -> None:
    """A stopping worker process hands its unfinished hosted runs back to the queue."""
    from executions.runhost import run_host_shutdown

    run_host_shutdown()


@worker_init.connect
def _metrics_dir_prepared(**kwargs) -> None:
    """A starting worker marks the files of processes that are gone as dead and merges
    their counters and histograms into the aggregate files; it never empties the
    directory, which the web process and other workers write to while they live
    (docs/observability.md, "Several processes"). Also sent by the embedded worker that
    ``runriver`` starts in its own process."""
    from telemetry.metrics import metrics_dir_prepare

    metrics_dir_prepare()


@worker_process_shutdown.connect
def _metrics_process_dead(pid=None, **kwargs) -> None:
    """A prefork child leaves with ``os._exit`` (no atexit): it marks itself dead here."""
    from telemetry.metrics import metrics_process_dead

    metrics_process_dead(pid)


@worker_process_init.connect
def _traces_in_this_process(**kwargs) -> None:
    """A forked worker process exports its own spans with an exporter of its own, not
    the main process's (docs/observability.md, Traces)."""
    from telemetry.traces import traces_process_init

    traces_process_init()


@worker_process_shutdown.connect
def _traces_flushed(**kwargs) -> None:
    """A worker process leaves with ``os._exit``: send its queued spans first."""
    from telemetry.traces import traces_process_flush

    traces_process_flush()
