from django.apps import AppConfig


class TelemetryConfig(AppConfig):
    name = "telemetry"
    verbose_name = "Telemetry"

    def ready(self) -> None:
        from django.conf import settings

        from telemetry.traces import traces_setup

        # Off (and free) unless an OTLP endpoint is configured.
        traces_setup(endpoint=settings.OTEL_EXPORTER_OTLP_ENDPOINT, service_name=settings.OTEL_SERVICE_NAME)
