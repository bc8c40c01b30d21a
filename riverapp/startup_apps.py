"""AppConfigs of two installed packages, made to load less when a process starts
(docs/running.md, "Installing and starting cold").

They live here, not in ``riverapp/apps.py``: Django picks an app's AppConfig from its
``apps`` module only while that module defines one (or marks one ``default``), and
``riverapp``'s own config is found that way (tests/riverapp/test_cold_start.py)."""

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
