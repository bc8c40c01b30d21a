"""Settings for the celery beat processes of tests/triggers/test_two_beats.py: the test
settings without River's own periodic entries, so the beats send only the trigger's."""

from tests.settings import *  # noqa: F403

CELERY_BEAT_SCHEDULE: dict = {}
