from django.apps import AppConfig


class ExecutionsConfig(AppConfig):
    name = "executions"
    verbose_name = "Executions"

    def ready(self) -> None:
        import executions.tools  # noqa: F401 - importing the package registers every built-in tool once
        from executions.services.approvals import ExecutionRunControl
        from governance.runs import run_control_install

        run_control_install(ExecutionRunControl())  # how approvals resume and end runs
        from executions.services.previews import ExecutionEffectPreviewer
        from governance.previews import effect_previewer_install

        effect_previewer_install(ExecutionEffectPreviewer())  # how approvals preview a call's effect
        import executions.tasks  # noqa: F401 - registers the tasks the services send by name
        from executions.runhost import run_host_post_processor_set
        from executions.services import execution_post_process

        run_host_post_processor_set(lambda execution_id: execution_post_process(execution_id=execution_id))
        from executions.runend import run_end_handler_register
        from executions.services.delegation import delegation_child_ended

        run_end_handler_register("delegation", delegation_child_ended,  # a child's end resumes its parent
                                 applies=lambda ended: ended.parent_execution_id is not None)
        from executions.services.sessions import session_run_ended

        run_end_handler_register("sessions", session_run_ended,  # the next queued message, or a hand-off
                                 applies=lambda ended: ended.session_id is not None)
        from executions.metrics import run_ended_metrics

        # runs by status, trigger type, queue wait: counted once post-processing has committed
        run_end_handler_register("metrics", run_ended_metrics, after_commit=True)
        from executions.services.memory import workspace_memory_on_run_end
        from rivercore.outcome import Outcome

        run_end_handler_register("workspace_memory", workspace_memory_on_run_end,  # docs/memory.md
                                 applies=lambda ended: ended.outcome == Outcome.ANSWERED
                                 and ended.parent_execution_id is None)

        from artifacts.quota import storage_usage_source_register
        from executions.selectors import execution_storage_usage

        storage_usage_source_register(  # stored run results count towards the storage quota
            "executions", lambda workspace_id: execution_storage_usage(workspace_id=workspace_id)[1])

        from executions.modelcalls import ModelCallRecorder
        from rivercore.observe import observer_install

        observer_install("model_calls", ModelCallRecorder())  # every model call recorded with its turn
