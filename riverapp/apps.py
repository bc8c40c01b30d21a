from django.apps import AppConfig
from django.contrib.admin.apps import SimpleAdminConfig


class DaphneRunserverConfig(AppConfig):
    """Daphne as an installed app for one thing: ``manage.py runserver`` serves River's
    ASGI application (pages, API and WebSockets) through Daphne's own command.

    Daphne's own AppConfig (``"daphne"``) imports ``daphne.server``, and with it Twisted
    and its asyncio reactor, in every process that sets Django up: a third of a second of
    CPU in each Celery worker and ``manage.py`` command that never serves HTTP. This one
    names the same package without that import; the runserver command imports the server
    when it is run. Listed before ``django.contrib.staticfiles``, whose runserver it
    replaces (tests/riverapp/test_cold_start.py)."""

    name = "daphne"
    verbose_name = "Daphne (runserver)"


class AdminConfig(SimpleAdminConfig):
    """Django admin without importing every app's ``admin`` module at start-up.

    Django's default AdminConfig imports them all in ``ready()``: half a second of CPU in
    every Celery worker and ``manage.py`` command, none of which serves the admin. Here
    ``riverapp.urls`` calls ``admin.autodiscover()`` (Django's documented pattern with
    SimpleAdminConfig), so the processes that serve pages load them with the URLconf,
    and the admin's system checks load them first themselves (the checks run in no fixed
    order, so they cannot count on the URLconf check having run before them)."""

    def ready(self) -> None:
        from django.contrib.admin.checks import check_dependencies
        from django.core import checks

        checks.register(check_dependencies, checks.Tags.admin)
        checks.register(_admin_app_checked, checks.Tags.admin)


def _admin_app_checked(app_configs, **kwargs):
    from django.contrib import admin
    from django.contrib.admin.checks import check_admin_app

    admin.autodiscover()
    return check_admin_app(app_configs, **kwargs)


class RiverappConfig(AppConfig):
    name = "riverapp"
    verbose_name = "River"

    def ready(self) -> None:
        _metric_series_known_at_zero()


def _metric_series_known_at_zero() -> None:
    """Series whose label values the apps below own (the tool registry, firing and
    approval enums) start at 0 in every process, so a scrape sees the first event as an
    increase. River's own enums are zeroed by ``telemetry.metrics`` at import; these
    are wired here because ``telemetry`` sits below the apps that own them."""
    from governance.models import ApprovalRequest
    from rivercore.contracts import TriggerType
    from rivercore.tools import all_tools
    from telemetry import metrics
    from triggers.models import TriggerFiring

    metrics.tool_series_zero(all_tools().values())
    metrics.metrics_series_zero(metrics.approval_decision_seconds, [
        status.value for status in ApprovalRequest.Status if status != ApprovalRequest.Status.PENDING])
    types = [trigger_type.value for trigger_type in TriggerType]
    metrics.metrics_series_zero(metrics.trigger_firings_total, types, [TriggerFiring.Outcome.STARTED.value], ["none"])
    metrics.metrics_series_zero(metrics.trigger_firings_total, types, [TriggerFiring.Outcome.SKIPPED.value],
                                [reason.value for reason in TriggerFiring.Reason])
    # A key's invocation refused before any firing row (triggers.apikeys).
    metrics.metrics_series_zero(metrics.trigger_firings_total, types, ["refused"],
                                [TriggerFiring.Reason.DISABLED.value, TriggerFiring.Reason.RATE_LIMITED.value])
