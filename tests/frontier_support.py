"""Frontier test helpers: a URL in flight as the frontier's own dispatch leaves it."""

from __future__ import annotations

import msgspec

from common.messages import UrlStatus
from common.ports import UrlState
from frontier.service import Frontier


async def fly(frontier: Frontier, row: UrlState, task_id: str) -> UrlState:
    """Record ``row`` (as stored: QUEUED) in flight in ``frontier`` under ``task_id``,
    as a dispatch does: the frontier's memory holds it IN_FLIGHT with its attempt
    counted, the store keeps it QUEUED (frontier.dispatch). Returns the row in flight."""
    slot = await frontier.hosts.slot(row.host)
    flying = msgspec.structs.replace(row, status=UrlStatus.IN_FLIGHT,
                                     attempts=row.attempts + 1)
    slot.tasks.add(task_id)
    slot.flying[task_id] = flying
    frontier.dispatcher.outstanding += 1
    return flying
