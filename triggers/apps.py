from django.apps import AppConfig


class TriggersConfig(AppConfig):
    name = "triggers"
    verbose_name = "Triggers"

    def ready(self) -> None:
        from executions.runend import run_end_handler_register
        from triggers.pipelines import pipeline_run_ended

        run_end_handler_register("pipelines", pipeline_run_ended)
