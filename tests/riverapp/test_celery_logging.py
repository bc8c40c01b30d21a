"""A worker started with ``-l info`` still logs Celery's startup lines ("... ready.") when
River's LOG_LEVEL is quieter: scripts and operators wait for that line."""

from __future__ import annotations

import copy
import logging
import logging.config

import pytest
from celery.signals import setup_logging


@pytest.fixture
def quiet_river_logging(settings):
    original = copy.deepcopy(settings.LOGGING)
    quiet = copy.deepcopy(settings.LOGGING)
    quiet["root"]["level"] = "ERROR"
    settings.LOGGING = quiet
    celery_level = logging.getLogger("celery").level
    yield
    logging.config.dictConfig(original)
    logging.getLogger("celery").setLevel(celery_level)


def test_the_workers_level_reaches_celerys_loggers_but_not_rivers(quiet_river_logging):
    setup_logging.send(sender=None, loglevel=logging.INFO, logfile=None, format="", colorize=False)
    assert logging.getLogger("celery.apps.worker").isEnabledFor(logging.INFO)
    assert not logging.getLogger("executions.tasks").isEnabledFor(logging.INFO)  # LOG_LEVEL=ERROR still holds
    assert logging.getLogger().handlers, "River's handlers stay installed"


def test_without_a_level_from_the_command_river_logging_decides(quiet_river_logging):
    logging.getLogger("celery").setLevel(logging.NOTSET)
    setup_logging.send(sender=None, loglevel=None, logfile=None, format="", colorize=False)
    assert not logging.getLogger("celery.apps.worker").isEnabledFor(logging.INFO)
