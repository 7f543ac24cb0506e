"""The gateway's ``/openapi.json``: request bodies, rehearsal knobs and error answers declared.

Routes read their body as bytes (``read_body``) and validate it with the wire models, so that the
engine receives the client's own bytes; FastAPI therefore sees no body parameter and, left alone,
would describe ``POST /v1/chat/completions`` as taking nothing and answering only 200. API tools
(schemathesis, client generators) need more, so each route declares here what it reads and says:

- the chat and responses request bodies, as the JSON Schema of ``ChatCompletionRequest`` and
  ``ResponsesRequest`` plus the ``rehearsal`` object, whose bounds and defaults are this
  deployment's (``RGW_MAX_BUDGET``, ``RGW_REHEARSAL_MODE``, …), and the ``X-Rehearsal-*`` headers;
- every error status a route can answer, each with the OpenAI error envelope
  (``{"error": {"message", "type", "param", "code"}}``, ``server/errors.py``); routes that reach
  an engine also declare ``4XX`` (an engine's own refusal, relayed with its status);
- path parameters of relayed routes, bearer auth when API keys are configured, and no FastAPI
  422 answers: a body or parameter that does not validate is a 400 here.

The document is built once per app, on first request, by ``install``.
"""

from __future__ import annotations

import re
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel

from rehearsal_gateway.rehearsal.budget import COMMIT_RULES, HEADERS, MODES, Budget, BudgetCaps

from ..protocol import (
    ChatCompletion,
    ChatCompletionRequest,
    ErrorEnvelope,
    ModelList,
)
from ..rehearse.defaults import budget_caps, budget_defaults
from ..responses_protocol import ResponsesRequest
from ..settings import GatewaySettings
from .auth import OPEN_PATHS

Responses = dict[int | str, dict[str, Any]]

# Wire models of the bodies ``request_body`` declares, each with the ``rehearsal`` object added.
BODY_MODELS: tuple[type[BaseModel], ...] = (ChatCompletionRequest, ResponsesRequest)
# Wire models the routes' answers refer to (``json_answer``), published in components.schemas.
ANSWER_MODELS: tuple[type[BaseModel], ...] = (ChatCompletion, ModelList, ErrorEnvelope)

_REF = "#/components/schemas/{model}"
ENVELOPE_REF = {"$ref": _REF.format(model="ErrorEnvelope")}

ERRORS: dict[int | str, str] = {
    400: "malformed JSON, a wrong type, an unknown role, a bad tool schema or rehearsal knob",
    401: "API keys are configured and the request carries none or a wrong one",
    404: "no such model, route or stored resource",
    413: "the body is over RGW_MAX_BODY_BYTES",
    "4XX": "the engine refused the request: its status, message, param and code, relayed",
    502: "the engine answered 5xx or broke the protocol, on every engine tried",
    503: "no healthy engine, every engine at its concurrency limit, or the store down",
    504: "the engine went silent for longer than the read timeout",
}
# What any route that calls an engine may answer (a GET has no body, so no 400 or 413 of ours).
ENGINE_ERRORS = (400, 401, 404, 413, "4XX", 502, 503, 504)
ENGINE_GET_ERRORS = (401, 404, "4XX", 502, 503, 504)


def errors(*statuses: int | str) -> Responses:
    """``responses=`` entries: each status answered with the OpenAI error envelope."""
    return {
        status: {
            "description": ERRORS[status],
            "content": {"application/json": {"schema": ENVELOPE_REF}},
        }
        for status in statuses
    }


def json_answer(
    schema: type[BaseModel] | dict[str, Any], description: str, *, streams: bool = False
) -> Responses:
    """The 200 answer: ``schema`` as JSON (a wire model by reference), SSE too if it streams."""
    if not isinstance(schema, dict):
        schema = {"$ref": _ref(schema)}
    content: dict[str, Any] = {"application/json": {"schema": schema}}
    if streams:
        content["text/event-stream"] = {"schema": SSE_EVENT}
    return {200: {"description": description, "content": content}}


# Before OpenAPI 3.2 (we publish 3.1) a ``text/event-stream`` schema describes one event, as
# tools read it (schemathesis validates each event, parsed to these fields, against it).
SSE_EVENT: dict[str, Any] = {
    "type": "object",
    "description": "One server-sent event. Chat: `data` is a chunk's JSON, then `[DONE]`; "
    "Responses: `event` names the event and `data` is its JSON.",
    "properties": {
        "event": {"type": "string"},
        "data": {"type": "string"},
        "id": {"type": "string"},
        "retry": {"type": "integer"},
    },
    "required": ["data"],
}


def request_body(model: type[BaseModel]) -> dict[str, Any]:
    """``openapi_extra`` for a route whose JSON body is ``model``, plus the knob headers."""
    return {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": {"$ref": _ref(model)}}},
        },
        "parameters": [
            {
                "name": header,
                "in": "header",
                "required": False,
                "description": f"rehearsal.{field}, for clients that cannot add body fields",
                "schema": {},  # this server's bounds, filled in by ``describe``
            }
            for header, field in HEADERS.items()
        ],
    }


def path_parameters(path: str) -> dict[str, Any]:
    """``openapi_extra`` declaring each ``{name}`` of ``path`` (a route that reads none itself)."""
    names = re.findall(r"{(\w+)}", path)
    params = [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
        for name in names
    ]
    return {"parameters": params} if params else {}


def install(app: FastAPI, settings: GatewaySettings) -> None:
    """Serve the document ``describe`` builds as the app's ``/openapi.json``."""

    def document() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = describe(app, settings)
        return app.openapi_schema

    app.openapi = document  # type: ignore[method-assign]  # FastAPI's documented extension point


def describe(app: FastAPI, settings: GatewaySettings) -> dict[str, Any]:
    """The OpenAPI 3.1 document of ``app`` as configured by ``settings``."""
    doc = get_openapi(
        title=app.title, version=app.version, routes=app.routes, description=_DESCRIPTION
    )
    bounds = knob_bounds(budget_caps(settings))
    for operations in doc["paths"].values():
        for operation in operations.values():
            operation["responses"].pop("422", None)  # answered 400 (server/app.py), never 422
            for parameter in operation.get("parameters", ()):
                if parameter["in"] == "header" and parameter["name"] in HEADERS:
                    parameter["schema"] = bounds[HEADERS[parameter["name"]]]
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})
    schemas.pop("HTTPValidationError", None)
    schemas.pop("ValidationError", None)
    knobs = {"anyOf": [{"$ref": _REF.format(model="RehearsalKnobs")}, {"type": "null"}]}
    for body in BODY_MODELS:
        schemas.update(_with_defs(body, rehearsal=knobs))
    for answer in ANSWER_MODELS:
        schemas.update(_with_defs(answer))
    schemas["RehearsalKnobs"] = knob_schema(budget_defaults(settings), budget_caps(settings))
    if settings.api_keys:
        doc["components"]["securitySchemes"] = {"apiKey": {"type": "http", "scheme": "bearer"}}
        doc["security"] = [{"apiKey": []}]
        for path in OPEN_PATHS & doc["paths"].keys():
            for operation in doc["paths"][path].values():
                operation["security"] = []  # the probes answer without a key
    return doc


def knob_bounds(caps: BudgetCaps) -> dict[str, dict[str, Any]]:
    """Each rehearsal knob's JSON Schema within this server's caps (body field or header)."""
    return {
        "mode": {"type": "string", "enum": list(MODES)},
        "budget": {"type": "integer", "minimum": 0, "maximum": caps.max_budget},
        "depth": {"type": "integer", "minimum": 1, "maximum": caps.max_depth},
        "commit": {"type": "string", "enum": list(COMMIT_RULES)},
        "deadline_ms": {"type": "integer", "minimum": 1, "maximum": caps.max_deadline_ms},
        "temperature": {"type": "number", "minimum": 0, "maximum": caps.max_temperature},
        "top_p": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
        "early_exit": {"type": "boolean"},
        "trace": {"type": "boolean"},
    }


def knob_schema(defaults: Budget, caps: BudgetCaps) -> dict[str, Any]:
    """The body's ``rehearsal`` object: each knob's type, this server's bounds and defaults.

    ``null`` means "not given" (the header, then the default applies); an unknown knob is a 400,
    so the object admits no other property.
    """
    properties = {
        name: {"anyOf": [schema, {"type": "null"}], "default": getattr(defaults, name)}
        for name, schema in knob_bounds(caps).items()
    }
    return {
        "type": "object",
        "title": "RehearsalKnobs",
        "description": "How much private rehearsal the request may spend (docs/rehearsal-knobs.md)",
        "properties": properties,
        "additionalProperties": False,
    }


def _ref(model: type[BaseModel]) -> str:
    return _REF.format(model=model.__name__)


def _with_defs(model: type[BaseModel], **extra: dict[str, Any]) -> dict[str, Any]:
    """``model``'s schema and the schemas it refers to, keyed for ``components.schemas``."""
    schema = model.model_json_schema(ref_template=_REF)
    found: dict[str, Any] = schema.pop("$defs", {})
    if extra:
        schema["properties"] = {**schema["properties"], **extra}
    found[model.__name__] = schema
    return found


_DESCRIPTION = (
    "OpenAI-compatible gateway in front of vLLM engines. Requests with tools may be rehearsed "
    "(the `rehearsal` body object or `X-Rehearsal-*` headers); every other vLLM route is relayed. "
    "Errors are the OpenAI envelope."
)
