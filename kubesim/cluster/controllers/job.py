"""The Job controller: runs a Job's pods to completion and reports it `Complete` or `Failed`.

Kept to what a one-off task (a database migration) needs: `completions` pods must succeed, at most
`parallelism` run at once, more than `backoffLimit` failed pods fail the Job (reason
BackoffLimitExceeded). Pods carry the labels the real controller sets (`batch.kubernetes.io/job-name`,
`batch.kubernetes.io/controller-uid`); kubesim's generic workload runs such a pod to completion, since
it cannot run the image's program. Indexed jobs, `activeDeadlineSeconds` and pod failure policies are
not simulated.
"""

from __future__ import annotations

import copy
import random

from kubesim.apiserver.errors import ApiError
from kubesim.apiserver.objects import now_rfc3339
from kubesim.cluster.controllers.base import Controller, Informer, controller_of, key_of
from kubesim.cluster.controllers.common import PODS, pod_from_template, pod_ready, random_suffix, write_status

JOBS = "batch/v1/jobs"
COMPONENT = "job-controller"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
CONTROLLER_UID_LABEL = "batch.kubernetes.io/controller-uid"


def job_condition(kind: str, reason: str, message: str) -> dict:
    stamp = now_rfc3339()
    return {"type": kind, "status": "True", "lastProbeTime": stamp, "lastTransitionTime": stamp,
            "reason": reason, "message": message}


class JobController(Controller):
    name = COMPONENT

    def __init__(self, api, recorder, jobs: Informer, pods: Informer, rng: random.Random):
        super().__init__()
        self.api, self.recorder, self.jobs, self.pods, self.rng = api, recorder, jobs, pods, rng
        jobs.handlers.append(lambda _t, obj, _old: self.enqueue(key_of(obj)))
        pods.handlers.append(self._pod_changed)

    def _pod_changed(self, _type: str, pod: dict, old: dict | None) -> None:
        for candidate in (pod, old):
            ref = controller_of(candidate or {})
            if ref and ref.get("kind") == "Job":
                self.enqueue(((pod["metadata"].get("namespace") or ""), ref["name"]))

    async def reconcile(self, key) -> None:
        job = self.jobs.get(*key)
        if job is None or job["metadata"].get("deletionTimestamp"):
            return
        spec, status = job.get("spec") or {}, copy.deepcopy(job.get("status") or {})
        if any(c.get("type") in ("Complete", "Failed") for c in status.get("conditions") or []):
            return  # finished Jobs keep their pods and status
        uid = job["metadata"]["uid"]
        pods = [p for p in self.pods.owned_by(uid) if (controller_of(p) or {}).get("uid") == uid]
        phases = [(p.get("status") or {}).get("phase") for p in pods]
        succeeded, failed = phases.count("Succeeded"), phases.count("Failed")
        active = len(pods) - succeeded - failed
        completions = int(spec.get("completions", 1))
        conditions = list(status.get("conditions") or [])
        if succeeded >= completions:
            message = "Reached expected number of succeeded pods"
            conditions += [job_condition("SuccessCriteriaMet", "CompletionsReached", message),
                           job_condition("Complete", "CompletionsReached", message)]
            status["completionTime"] = now_rfc3339()
            await self.recorder.record(job, "Completed", "Job completed", component=COMPONENT)
        elif failed > int(spec.get("backoffLimit", 6)):
            message = "Job has reached the specified backoff limit"
            conditions += [job_condition("FailureTarget", "BackoffLimitExceeded", message),
                           job_condition("Failed", "BackoffLimitExceeded", message)]
            await self.recorder.record(job, "BackoffLimitExceeded", message, "Warning", COMPONENT)
        else:
            wanted = min(int(spec.get("parallelism", 1)), completions - succeeded) - active
            for _ in range(max(wanted, 0)):
                active += await self._create(job)
        ready = sum(1 for p in pods if pod_ready(p))
        status.update({"active": active, "succeeded": succeeded, "failed": failed, "ready": ready})
        status.setdefault("startTime", now_rfc3339())
        status["terminating"] = 0
        if conditions:
            status["conditions"] = conditions
        for name in ("active", "succeeded", "failed"):
            if not status[name]:
                status.pop(name)  # the apiserver omits zero counts
        await write_status(self.api, JOBS, self.jobs, job, status)

    async def _create(self, job: dict) -> int:
        name = f"{job['metadata']['name']}-{random_suffix(self.rng)}"
        labels = {JOB_NAME_LABEL: job["metadata"]["name"], CONTROLLER_UID_LABEL: job["metadata"]["uid"],
                  "job-name": job["metadata"]["name"], "controller-uid": job["metadata"]["uid"]}
        pod = pod_from_template(job, (job.get("spec") or {}).get("template") or {}, name, extra_labels=labels)
        try:
            created = await self.api.create(PODS, pod)
        except ApiError as error:
            if error.code != 409:
                await self.recorder.record(job, "FailedCreate", f"Error creating: {error.message}", "Warning",
                                           COMPONENT)
            return 0
        self.pods.apply("ADDED", created)  # counted from now on, before its watch event arrives
        await self.recorder.record(job, "SuccessfulCreate", f"Created pod: {name}", component=COMPONENT)
        return 1
