"""Request bodies for the pass-through benchmarks: a small tool chat and a realistic agent turn.

``small`` is the body the overhead benchmark always sent: a short system prompt, five retail
tools, one to three turns, half of them carrying an assistant tool call and its result (~1.5 KB).
``agent`` is what an agent framework sends mid-task: a ~500-character system prompt, twelve
tools whose parameters carry descriptions, enums and arrays, and a history of four to eight
turns in which the assistant called tools and the tools answered with JSON records (~8–14 KB).
Both are deterministic for a seed, and every body differs (ids, seeds, records), so no layer can
cache one answer.
"""

from __future__ import annotations

import random
from typing import Any

import orjson

MODEL = "EnvACE-Qwen3-8B"


def _tool(name: str, description: str, props: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": props, "required": list(props)},
        },
    }


def _text(description: str) -> dict[str, Any]:
    return {"type": "string", "description": description}


SMALL_TOOLS = [
    _tool("get_order_details", "Look up an order by id.", {"order_id": {"type": "string"}}),
    _tool("get_user_details", "Look up a user by id.", {"user_id": {"type": "string"}}),
    _tool(
        "cancel_pending_order",
        "Cancel a pending order.",
        {
            "order_id": {"type": "string"},
            "reason": {"type": "string", "enum": ["no longer needed", "ordered by mistake"]},
        },
    ),
    _tool(
        "return_delivered_order_items",
        "Return items of a delivered order.",
        {
            "order_id": {"type": "string"},
            "item_ids": {"type": "array", "items": {"type": "string"}},
            "payment_method_id": {"type": "string"},
        },
    ),
    _tool("find_user_id_by_email", "Find a user id.", {"email": {"type": "string"}}),
]
SMALL_SYSTEM = (
    "You are a retail customer-service agent. Authenticate the user first, check order status "
    "before any write, confirm every write with the user, and call one tool at a time."
)

AGENT_SYSTEM = (
    "You are the customer-service agent of an online retailer. Before anything else, "
    "authenticate the user by email or by name and zip code, and never act for anyone else. "
    "Before any write (cancel, modify, return, exchange, address change), read the order and "
    "the user's details, list what you will do, and obtain an explicit 'yes'. Cancel or modify "
    "only pending orders; return or exchange only delivered ones. Refunds go to the original "
    "payment method or an existing gift card. Call one tool at a time, never invent ids, and "
    "transfer to a human only when the request is outside these rules."
)

_ORDER = _text("The order id, such as '#W0000000', with the leading '#'.")
_USER = _text("The user id, such as 'sara_doe_496'.")
_ITEMS = {
    "type": "array",
    "items": {"type": "string"},
    "description": "The ids of the items concerned, each as listed in the order details.",
}
_PAYMENT = _text("A payment method id from the user's profile ('credit_card_…', 'gift_card_…').")
AGENT_TOOLS = [
    _tool(
        "find_user_id_by_email",
        "Find a user's id from their email address. Use it to authenticate the user.",
        {"email": _text("The user's email, such as 'something@example.com'.")},
    ),
    _tool(
        "find_user_id_by_name_zip",
        "Find a user's id from their first name, last name and zip code, when they have "
        "forgotten their email.",
        {
            "first_name": _text("The first name, such as 'John'."),
            "last_name": _text("The last name, such as 'Doe'."),
            "zip": _text("The five-digit zip code, such as '12345'."),
        },
    ),
    _tool(
        "get_user_details",
        "Read a user's profile: name, address, email, payment methods and orders.",
        {"user_id": _USER},
    ),
    _tool(
        "get_order_details",
        "Read an order: status, items with their options and prices, payments and fulfilment.",
        {"order_id": _ORDER},
    ),
    _tool(
        "get_product_details",
        "Read a product: its variants, their options, prices and availability.",
        {"product_id": _text("The product id, such as '6086499569'.")},
    ),
    _tool(
        "list_all_product_types",
        "List the names and ids of every product type the shop sells.",
        {},
    ),
    _tool(
        "cancel_pending_order",
        "Cancel a pending order. Refunds go to the original payment method within 5–7 days, "
        "or at once to a gift card. Confirm with the user first.",
        {
            "order_id": _ORDER,
            "reason": {
                "type": "string",
                "enum": ["no longer needed", "ordered by mistake"],
                "description": "Why the user cancels; only these two reasons are accepted.",
            },
        },
    ),
    _tool(
        "modify_pending_order_address",
        "Change the shipping address of a pending order. Confirm with the user first.",
        {
            "order_id": _ORDER,
            "address1": _text("The first line of the address."),
            "address2": _text("The second line of the address, or an empty string."),
            "city": _text("The city."),
            "state": _text("The two-letter state code."),
            "country": _text("The country, such as 'USA'."),
            "zip": _text("The five-digit zip code."),
        },
    ),
    _tool(
        "modify_pending_order_items",
        "Swap items of a pending order for other variants of the same product; can be done "
        "once per order. Confirm with the user first.",
        {
            "order_id": _ORDER,
            "item_ids": _ITEMS,
            "new_item_ids": _ITEMS,
            "payment_method_id": _PAYMENT,
        },
    ),
    _tool(
        "return_delivered_order_items",
        "Return items of a delivered order; the user receives return instructions by email.",
        {"order_id": _ORDER, "item_ids": _ITEMS, "payment_method_id": _PAYMENT},
    ),
    _tool(
        "exchange_delivered_order_items",
        "Exchange items of a delivered order for other variants of the same product.",
        {
            "order_id": _ORDER,
            "item_ids": _ITEMS,
            "new_item_ids": _ITEMS,
            "payment_method_id": _PAYMENT,
        },
    ),
    _tool(
        "transfer_to_human_agents",
        "Hand the conversation to a human agent, with a summary of the user's issue.",
        {"summary": _text("A summary of the user's issue and what was done so far.")},
    ),
]


def _call(rng: random.Random, name: str, arguments: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    call_id = f"chatcmpl-tool-{rng.getrandbits(128):032x}"
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": orjson.dumps(arguments).decode()},
            }
        ],
    }
    return call_id, message


def _result(call_id: str, record: Any) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": orjson.dumps(record).decode()}


def small_body(i: int, rng: random.Random) -> dict[str, Any]:
    """One to three turns of a retail chat, half of them with a tool call and its result."""
    order = f"#W{1000 + rng.randrange(9000)}"
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SMALL_SYSTEM},
        {"role": "user", "content": f"Hi, I am user {i}; please cancel order {order}."},
    ]
    if rng.random() < 0.5:
        call_id, call = _call(rng, "get_order_details", {"order_id": order})
        result = orjson.dumps({"order_id": order, "status": "pending"}).decode()
        messages += [call, {"role": "tool", "tool_call_id": call_id, "content": result}]
    return {
        "model": MODEL,
        "messages": messages,
        "tools": SMALL_TOOLS,
        "seed": i,
        "max_tokens": 256,
    }


def _order_record(rng: random.Random, order: str, user: str) -> dict[str, Any]:
    items = [
        {
            "name": rng.choice(["T-Shirt", "Desk Lamp", "Water Bottle", "Backpack", "Sneakers"]),
            "product_id": str(rng.randrange(10**9, 10**10)),
            "item_id": str(rng.randrange(10**9, 10**10)),
            "price": round(rng.uniform(5, 400), 2),
            "options": {"color": rng.choice(["red", "blue", "black"]), "size": rng.choice("SML")},
        }
        for _ in range(rng.randrange(1, 4))
    ]
    return {
        "order_id": order,
        "user_id": user,
        "address": {"address1": f"{rng.randrange(1, 999)} Elm Street", "address2": "",
                    "city": "Denver", "country": "USA", "state": "CO", "zip": "80202"},
        "items": items,
        "fulfillments": [],
        "status": rng.choice(["pending", "delivered", "processed"]),
        "payment_history": [{"transaction_type": "payment",
                             "amount": round(sum(x["price"] for x in items), 2),
                             "payment_method_id": f"credit_card_{rng.randrange(10**7)}"}],
    }  # fmt: skip


def agent_body(i: int, rng: random.Random) -> dict[str, Any]:
    """A mid-task agent turn: long system prompt, twelve tools, 4–8 turns of tool use."""
    user = f"sara_doe_{100 + i % 900}"
    email = f"{user}@example.com"
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": AGENT_SYSTEM},
        {"role": "user", "content": f"Hi, this is {user}, my email is {email}. I'd like to "
                                    "return something from my last order and cancel another."},
    ]  # fmt: skip
    call_id, call = _call(rng, "find_user_id_by_email", {"email": email})
    messages += [call, {"role": "tool", "tool_call_id": call_id, "content": user}]
    orders = [f"#W{rng.randrange(10**6, 10**7)}" for _ in range(rng.randrange(1, 4))]
    call_id, call = _call(rng, "get_user_details", {"user_id": user})
    card = {"source": "credit_card", "last_four": f"{rng.randrange(10**4):04d}"}
    profile = {
        "user_id": user,
        "name": {"first_name": "Sara", "last_name": "Doe"},
        "email": email,
        "orders": orders,
        "payment_methods": {"credit_card_1": card},
    }
    messages += [call, _result(call_id, profile)]
    messages.append({"role": "assistant", "content": f"Thanks Sara. Which of {', '.join(orders)}?"})
    messages.append({"role": "user", "content": f"The first one, {orders[0]}, please check it."})
    for order in orders:
        call_id, call = _call(rng, "get_order_details", {"order_id": order})
        messages += [call, _result(call_id, _order_record(rng, order, user))]
    return {
        "model": MODEL,
        "messages": messages,
        "tools": AGENT_TOOLS,
        "tool_choice": "auto",
        "temperature": 0.7,
        "seed": i,
        "max_tokens": 512,
    }


PROFILES = {"small": small_body, "agent": agent_body}


def build_bodies(profile: str, count: int, seed: int) -> list[bytes]:
    """``count`` encoded request bodies of one profile, deterministic for ``seed``."""
    rng = random.Random(seed)
    make = PROFILES[profile]
    return [orjson.dumps(make(i, rng)) for i in range(count)]
