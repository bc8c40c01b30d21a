"""The trigger settings are read at startup and a bad value stops River naming it."""

import pytest

from tests.riverapp.test_settings import _check


@pytest.mark.parametrize(("env", "message"), [
    ({"RIVER_SCHEDULE_MISSED_GRACE_SECONDS": "-1"}, "RIVER_SCHEDULE_MISSED_GRACE_SECONDS must be at least 0"),
    ({"RIVER_SCHEDULE_MISSED_GRACE_SECONDS": "15m"}, "RIVER_SCHEDULE_MISSED_GRACE_SECONDS must be an integer"),
    ({"RIVER_METRIC_RETENTION_HOURS": "0"}, "RIVER_METRIC_RETENTION_HOURS must be at least 1"),
    ({"RIVER_MAX_PIPELINE_DEPTH": "0"}, "RIVER_MAX_PIPELINE_DEPTH must be at least 1"),
    ({"RIVER_MAX_PIPELINE_DEPTH": "deep"}, "RIVER_MAX_PIPELINE_DEPTH must be an integer"),
], ids=["grace_negative", "grace_text", "retention_zero", "depth_zero", "depth_text"])
def test_a_bad_trigger_setting_stops_startup_naming_the_variable(env, message):
    result = _check({"DEBUG": "true", **env})
    assert result.returncode != 0
    assert message in result.stderr


def test_the_documented_defaults_and_the_beat_entries():
    from django.conf import settings

    assert settings.RIVER_SCHEDULE_MISSED_GRACE_SECONDS == 900
    assert settings.RIVER_METRIC_RETENTION_HOURS == 24
    assert settings.RIVER_MAX_PIPELINE_DEPTH == 10
    beat = settings.CELERY_BEAT_SCHEDULE
    assert beat["triggers-pipeline-handoffs-retry"]["task"] == "triggers.pipeline_handoffs_retry"
    assert beat["triggers-metrics-prune"]["task"] == "triggers.metrics_prune"
