"""The driver's pymesos-named calls (acceptOffers, declineOffer, reviveOffers, killTask, ...),
each built by messages.py and sent through the driver's ``_send`` (driver.py).

A mixin of ``driver.MesosSchedulerDriver``; it holds no state of its own.
"""

from __future__ import annotations

import logging
from typing import Any, Mapping

from . import messages as msg

log = logging.getLogger("mesos_framework.driver")


class PymesosCalls:
    """pymesos's MesosSchedulerDriver call methods, each one v1 scheduler call through ``_send``."""

    # -- calls (pymesos names) --------------------------------------------------------------
    def acceptOffers(self, offer_ids, operations, filters=None):
        if not operations:
            return self.declineOffer(offer_ids, filters)
        return self._send(lambda fid: {"framework_id": msg.ident(fid), "type": "ACCEPT", "accept": {
            "offer_ids": _ids(offer_ids), "operations": list(operations),
            **({"filters": dict(filters)} if filters is not None else {})}})

    def launchTasks(self, offer_ids, tasks, filters=None):
        if not tasks:
            return self.declineOffer(offer_ids, filters)
        return self.acceptOffers(offer_ids, [msg.launch(list(tasks))], filters)

    def declineOffer(self, offer_ids, filters=None):
        return self._send(lambda fid: {"framework_id": msg.ident(fid), "type": "DECLINE", "decline": {
            "offer_ids": _ids(offer_ids), **({"filters": dict(filters)} if filters is not None else {})}})

    def acceptInverseOffers(self, offer_ids, filters=None):
        return self._send(lambda fid: {"framework_id": msg.ident(fid), "type": "ACCEPT_INVERSE_OFFERS",
                                       "accept_inverse_offers": {"inverse_offer_ids": _ids(offer_ids),
                                       **({"filters": dict(filters)} if filters is not None else {})}})

    def declineInverseOffer(self, offer_ids, filters=None):
        return self._send(lambda fid: {"framework_id": msg.ident(fid), "type": "DECLINE_INVERSE_OFFERS",
                                       "decline_inverse_offers": {"inverse_offer_ids": _ids(offer_ids),
                                       **({"filters": dict(filters)} if filters is not None else {})}})

    def reviveOffers(self, roles=()):
        return self._send(lambda fid: msg.revive(fid, roles))

    def suppressOffers(self, roles=()):
        return self._send(lambda fid: msg.suppress(fid, roles))

    def killTask(self, task_id, agent_id=None):
        tid = task_id.get("value") if isinstance(task_id, Mapping) else task_id
        aid = agent_id.get("value") if isinstance(agent_id, Mapping) else agent_id
        return self._send(lambda fid: msg.kill(fid, tid, aid))

    def acknowledgeStatusUpdate(self, status):
        if "uuid" not in status or "agent_id" not in status:
            return None   # the doc: never acknowledge an update without uuid
        return self._send(lambda fid: {"framework_id": msg.ident(fid), "type": "ACKNOWLEDGE",
                                       "acknowledge": {"agent_id": status["agent_id"],
                                                       "task_id": status["task_id"],
                                                       "uuid": status["uuid"]}})

    def acknowledgeOperationStatusUpdate(self, status):
        if "uuid" not in status or "operation_id" not in status:
            return None
        body = {k: status[k] for k in ("agent_id", "resource_provider_id", "uuid", "operation_id")
                if k in status}
        return self._send(lambda fid: {"framework_id": msg.ident(fid),
                                       "type": "ACKNOWLEDGE_OPERATION_STATUS",
                                       "acknowledge_operation_status": body})

    def reconcileTasks(self, tasks):
        pairs = []
        for t in tasks:
            tid = t["task_id"]["value"] if isinstance(t.get("task_id"), Mapping) else t["task_id"]
            a = t.get("agent_id")
            pairs.append((tid, a.get("value") if isinstance(a, Mapping) else a))
        return self._send(lambda fid: msg.reconcile(fid, pairs))

    def reconcileOperations(self, operations):
        return self._send(lambda fid: msg.reconcile_operations(fid, operations))

    def sendFrameworkMessage(self, executor_id, agent_id, data):
        # pymesos passes ``data`` through as it is (callers Base64 it with encode_data).
        return self._send(lambda fid: {"framework_id": msg.ident(fid), "type": "MESSAGE", "message": {
            "agent_id": _id(agent_id), "executor_id": _id(executor_id), "data": data}})

    def requestResources(self, requests):
        return self._send(lambda fid: msg.request(fid, requests))

    def shutdownExecutor(self, executor_id, agent_id):
        return self._send(lambda fid: msg.shutdown(fid, _id(executor_id)["value"], _id(agent_id)["value"]))

    def teardown(self):
        return self._send(msg.teardown)

    def updateFramework(self, framework_info, suppressed_roles=()):
        with self._lock:
            self._framework.update(framework_info)
        return self._send(lambda fid: msg.update_framework({**self._framework, "id": msg.ident(fid)},
                                                           suppressed_roles))


def _id(x: Any) -> dict[str, str]:
    return dict(x) if isinstance(x, Mapping) else msg.ident(x)


def _ids(x: Any) -> list[dict[str, str]]:
    if isinstance(x, (Mapping, str)):
        return [_id(x)]
    return [_id(i) for i in x]


