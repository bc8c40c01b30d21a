from django.apps import AppConfig


class TelemetryConfig(AppConfig):
    name = "telemetry"
    verbose_name = "Telemetry"

    def ready(self) -> None:
        import logging

        from django.conf import settings

        # Python warnings are log records ("py.warnings"): River's handler writes them, in
        # the configured format and redacted, instead of a plain line on stderr.
        logging.captureWarnings(True)
        from django.core.signals import setting_changed

        from rivercore.observe import observer_install
        from telemetry.logs import secrets_forget, turn_log_observer
        from telemetry.metrics import MetricsObserver
        from telemetry.traces import traces_setup

        observer_install("metrics", MetricsObserver())  # engine steps and model calls → Prometheus
        setting_changed.connect(secrets_forget, dispatch_uid="telemetry.logs.secrets_forget")
        observer_install("turn_log", turn_log_observer)  # one JSON line per turn (docs/observability.md)

        # Off (and free) unless an OTLP endpoint is configured.
        traces_setup(endpoint=settings.OTEL_EXPORTER_OTLP_ENDPOINT, service_name=settings.OTEL_SERVICE_NAME)
