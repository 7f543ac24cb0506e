"""Optional API keys: 401 envelopes, open probes, tenant ids, and keys kept out of logs."""

from __future__ import annotations

import httpx
import pytest

from rehearsal_gateway.server.errors import Unauthorized
from rehearsal_gateway.server.http.auth import DEFAULT_TENANT, ApiKeyRing, key_digest, tenant_of
from tests.server.conftest import TWIN_MODEL

KEY = "sk-test-0f1e2d3c4b5a69788796a5b4c3d2e1f0"
OTHER_KEY = "sk-other-1234567890abcdef"


def test_keyring_maps_keys_to_stable_tenants() -> None:
    """Each configured key is its own tenant, derived from the digest and never the key itself."""
    ring = ApiKeyRing([KEY, OTHER_KEY])
    tenant = ring.authenticate(f"Bearer {KEY}")
    assert tenant == tenant_of(key_digest(KEY))
    assert tenant != ring.authenticate(f"bearer {OTHER_KEY}")
    assert KEY not in tenant
    assert tenant.startswith("t_")
    assert len(tenant) == 26


@pytest.mark.parametrize(
    "header",
    [
        pytest.param(None, id="missing"),
        pytest.param("", id="empty"),
        pytest.param(f"Basic {KEY}", id="wrong-scheme"),
        pytest.param("Bearer ", id="bearer-without-key"),
        pytest.param(f"Bearer {KEY}x", id="wrong-key"),
    ],
)
def test_keyring_rejects_bad_headers(header: str | None) -> None:
    """A missing, malformed or unknown key raises Unauthorized without echoing the key."""
    with pytest.raises(Unauthorized) as caught:
        ApiKeyRing([KEY]).authenticate(header)
    assert KEY not in caught.value.message


def test_no_keys_means_one_default_tenant() -> None:
    """Without configured keys every caller is the default tenant."""
    assert ApiKeyRing([]).authenticate(None) == DEFAULT_TENANT


def test_gateway_with_keys(start_twin, start_gateway) -> None:
    """Chat and models need the key (else 401); probes stay open; logs never show the key."""
    twin = start_twin("--seed", "1")
    gateway = start_gateway(
        twin.url + "/v1",
        args=("--access-log", "--log-level", "debug"),
        env={"RGW_API_KEYS": f"{KEY},{OTHER_KEY}"},
        process=True,  # uvicorn's access log is the process's
    )
    body = {"model": TWIN_MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
    chat = gateway.url + "/v1/chat/completions"
    for headers in ({}, {"Authorization": f"Bearer {KEY[:-1]}"}, {"Authorization": KEY}):
        for response in (
            httpx.post(chat, json=body, headers=headers),
            httpx.get(gateway.url + "/v1/models", headers=headers),
        ):
            assert response.status_code == 401
            assert response.json()["error"]["type"] == "authentication_error"
            assert response.json()["error"]["code"] == "invalid_api_key"
            assert KEY[:-1] not in response.text
    for path in ("/health", "/ready", "/metrics"):
        assert httpx.get(gateway.url + path).status_code == 200
    good = {"Authorization": f"Bearer {KEY}"}
    assert httpx.post(chat, json=body, headers=good).status_code == 200
    assert httpx.get(gateway.url + "/v1/models", headers=good).status_code == 200
    gateway.stop()
    log = gateway.log()
    assert "/v1/chat/completions" in log  # the access log ran
    assert KEY not in log
    assert KEY[:-1] not in log
    assert OTHER_KEY not in log
