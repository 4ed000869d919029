from django.apps import AppConfig


class WorkersConfig(AppConfig):
    """Registered so that the worker-side management commands (`reconcile`) are found, to bind each task's
    id into the log context, and to have a worker restore objects deleted behind its back."""

    name = "workers"
    label = "workers"

    def ready(self) -> None:
        from celery.signals import task_postrun, task_prerun, worker_init

        from controlplane import logcontext

        # Every log line of a task carries its id as the request id (tenant and service are bound by the
        # code that knows them).
        task_prerun.connect(lambda task_id=None, **_: logcontext.replace(request_id=task_id), weak=False)
        task_postrun.connect(lambda **_: logcontext.replace(), weak=False)
        # A worker's watch caches queue a pass of a service whose object someone else deleted (its pool's
        # forked processes inherit the hook).
        worker_init.connect(lambda **_: _install_restore(), weak=False)


def _install_restore() -> None:
    from workers import restore

    restore.install()
