"""Which trust count a real result adds to: the feedback path keeps weighed vetoes apart.

A vetoed call committed whatever its veto said (the anchor under untrusted vetoes) is an
unselected sample of imagination's vetoes; one a commit rule weighed against other candidates
is not (``rehearsal.trust``). The pending record carries which it was, and the real result lands
in ``ee``/``eo`` or ``we``/``wo`` accordingly; imagined successes count the same either way.
"""

from __future__ import annotations

import json

import pytest

from rehearsal_gateway.server.rehearse.committed import TOOL_CALL_PREFIX
from rehearsal_gateway.server.rehearse.feedback import Feedback, pending_record
from rehearsal_gateway.server.store.inprocess import InProcessStore
from rehearsal_gateway.server.store.writer import StoreWriter
from rehearsal_gateway.server.telemetry.metrics import GatewayMetrics


@pytest.mark.parametrize(
    ("outcome", "unconditional", "real", "cell"),
    [
        pytest.param("veto:INVALID", True, {"error": "no such order"}, "ee", id="unselected-right"),
        pytest.param("error", True, {"status": "ok"}, "eo", id="unselected-false"),
        pytest.param("veto:INVALID", False, {"error": "no such order"}, "we", id="weighed-right"),
        pytest.param("error", False, {"status": "ok"}, "wo", id="weighed-false"),
        pytest.param("ok", False, {"error": "no such order"}, "oe", id="miss"),
        pytest.param("ok", True, {"status": "ok"}, "oo", id="right-success"),
    ],
)
async def test_a_real_result_adds_to_the_cell_of_how_its_call_was_committed(
    outcome: str, unconditional: bool, real: dict[str, str], cell: str
) -> None:
    """The (imagined, real) pair of a weighed veto goes to we/wo, an unselected one to ee/eo."""
    store, writer = InProcessStore(), StoreWriter(GatewayMetrics())
    feedback = Feedback(store, GatewayMetrics(), writer)
    call_id = f"{TOOL_CALL_PREFIX}1"
    record = pending_record(
        tenant="t", session=None, rehearsal_id="rh_1", tool="get_order",
        arguments={"order_id": "#W1"}, imagined={"error": "x"}, imagined_outcome=outcome,
        unconditional=unconditional,
    )  # fmt: skip
    await store.save_pending("t", call_id, record)
    tool_message = {"role": "tool", "tool_call_id": call_id, "content": json.dumps(real)}
    recorded = await feedback.collect("t", [tool_message])
    assert [r["tool"] for r in recorded] == ["get_order"]
    await writer.close(grace_s=5)
    assert await store.trust_table("t") == {"get_order": {cell: 1}, "*": {cell: 1}}


async def test_a_record_written_before_the_flag_existed_counts_as_weighed() -> None:
    """A record without ``unconditional`` (an older replica's): its veto counts as weighed."""
    store, writer = InProcessStore(), StoreWriter(GatewayMetrics())
    call_id = f"{TOOL_CALL_PREFIX}2"
    record = pending_record(
        tenant="t", session=None, rehearsal_id="rh_2", tool="get_order", arguments={},
        imagined=None, imagined_outcome="veto:INVALID",
    )  # fmt: skip
    del record["unconditional"]
    await store.save_pending("t", call_id, record)
    message = {"role": "tool", "tool_call_id": call_id, "content": '{"status": "ok"}'}
    await Feedback(store, GatewayMetrics(), writer).collect("t", [message])
    await writer.close(grace_s=5)
    assert (await store.trust_table("t"))["*"] == {"wo": 1}
