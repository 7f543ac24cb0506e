"""The model-name switch through the official `openai` SDK: MODEL@parallel-4 chooses rehearsal."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

import openai
import pytest

from rehearsal_gateway.server.launcher.sources import Given, SettingsRefused, load_settings
from rehearsal_gateway.twin.worlds import load_world
from tests.server.conftest import TWIN_MODEL
from tests.support.procs import Proc

RETAIL = load_world("retail")
ASK = [{"role": "user", "content": "Where is order W1001?"}]


@pytest.fixture
def sdk(
    start_twin: Callable[..., Proc], start_gateway: Callable[..., Proc]
) -> Iterator[Callable[..., openai.OpenAI]]:
    """Factory: an SDK client of a gateway (twin behind it) started with ``env``."""
    clients: list[openai.OpenAI] = []

    def _open(env: dict[str, str]) -> openai.OpenAI:
        twin = start_twin("--world", "retail", "--skill", "1.0")
        gateway = start_gateway(twin.url + "/v1", args=("--alias", "envace=" + TWIN_MODEL), env=env)
        client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="x", max_retries=0)
        clients.append(client)
        return client

    yield _open
    for client in clients:
        client.close()


def test_switched_names_are_listed_and_choose_rehearsal(sdk: Callable[..., openai.OpenAI]) -> None:
    """`/v1/models` lists each model and alias per switch; a switched name rehearses so."""
    client = sdk(
        {
            "RGW_MODEL_SWITCH": "parallel-4,sequential-2,parallel-auto",
            "RGW_REHEARSAL_COMMIT": "reflect",
        }
    )
    models = {model.id: model for model in client.models.list()}
    assert {"EnvACE-Qwen3-8B@parallel-4", "envace@sequential-2"} <= set(models)
    assert models["EnvACE-Qwen3-8B@parallel-4"].model_extra["parent"] == TWIN_MODEL  # type: ignore[index]
    completion = client.chat.completions.create(
        model="envace@parallel-4", messages=ASK, tools=RETAIL.tool_schemas(), seed=1
    )
    rehearsal = completion.model_extra["rehearsal"]  # type: ignore[index]
    assert (rehearsal["mode"], rehearsal["budget"]) == ("parallel", 4)
    assert completion.model == "envace"  # the plain name, the switch taken off
    headed = client.chat.completions.create(
        model=f"{TWIN_MODEL}@sequential-2", messages=ASK, tools=RETAIL.tool_schemas(), seed=1,
        extra_headers={"X-Rehearsal-Budget": "1"},
    )  # fmt: skip
    rehearsal = headed.model_extra["rehearsal"]  # type: ignore[index]
    assert (rehearsal["mode"], rehearsal["budget"]) == ("sequential", 1)  # a header wins
    with pytest.raises(openai.NotFoundError) as unknown:
        client.chat.completions.create(model=f"{TWIN_MODEL}@parallel-9", messages=ASK)
    assert "switches are @parallel-4, @sequential-2, @parallel-auto" in str(unknown.value)
    learned = client.chat.completions.create(
        model="envace@parallel-auto", messages=ASK, tools=RETAIL.tool_schemas(), seed=1
    )
    rehearsal = learned.model_extra["rehearsal"]  # type: ignore[index]
    # auto needs the anchored rule, which the switch brings over the deployment's reflect
    learned_why = rehearsal["auto"]["why"]
    assert (rehearsal["commit"], learned_why) == ("anchored", "too few real results yet")


def test_the_responses_api_takes_the_switch_too(sdk: Callable[..., openai.OpenAI]) -> None:
    """A Responses request for a switched name rehearses so; with no tools it is relayed under
    the plain name; an unknown switch is the same 404 as for chat."""
    client = sdk({"RGW_MODEL_SWITCH": "parallel-4"})
    tools = [{"type": "function", **schema["function"]} for schema in RETAIL.tool_schemas()]
    response = client.responses.create(
        model="envace@parallel-4",
        input="Where is order W1001?",
        tools=tools,  # type: ignore[arg-type]
    )
    rehearsal = response.model_extra["rehearsal"]  # type: ignore[index]
    assert (rehearsal["mode"], rehearsal["budget"]) == ("parallel", 4)
    relayed = client.responses.create(model="envace@parallel-4", input="hello")
    assert relayed.output_text
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="envace@sequential-9", input="hello")


def test_the_switch_is_off_unless_asked_for(sdk: Callable[..., openai.OpenAI]) -> None:
    """Without RGW_MODEL_SWITCH a switched name is just an unknown model, and none is listed."""
    client = sdk({})
    assert all("@" not in model.id for model in client.models.list())
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model=f"{TWIN_MODEL}@parallel-4", messages=ASK)


@pytest.mark.parametrize(
    ("switch", "says"),
    [
        pytest.param("parallel-20", "@parallel-20: the budget must be between 0 and 8", id="cap"),
        pytest.param("fast", "a switch is MODE or MODE-BUDGET", id="form"),
        pytest.param("parallel-some", "a switch is MODE or MODE-BUDGET", id="word"),
    ],
)
def test_a_bad_switch_is_refused_at_start(switch: str, says: str) -> None:
    """A switch that could only ever be refused stops start-up instead."""
    saved = dict(os.environ)
    os.environ["RGW_MODEL_SWITCH"] = switch
    try:
        with pytest.raises(SettingsRefused) as refused:
            load_settings(Given())
    finally:
        os.environ.clear()
        os.environ.update(saved)
    assert str(refused.value).startswith(f"RGW_MODEL_SWITCH={switch}")
    assert says in str(refused.value)
