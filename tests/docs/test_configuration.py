"""The configuration reference stays complete: every setting and header is documented."""

from __future__ import annotations

from rehearsal_gateway.rehearsal.budget import HEADERS
from rehearsal_gateway.server.settings import GatewaySettings
from tests.support.procs import ROOT

REFERENCE = (ROOT / "docs" / "configuration.md").read_text()


def test_every_setting_has_its_variable_in_the_reference() -> None:
    """Each GatewaySettings field appears with its RGW_ variable in docs/configuration.md."""
    missing = [
        name for name in GatewaySettings.model_fields if f"`RGW_{name.upper()}`" not in REFERENCE
    ]
    assert missing == []


def test_every_rehearsal_header_is_in_the_reference() -> None:
    """Each X-Rehearsal-* header the gateway reads is documented."""
    assert [header for header in HEADERS if header not in REFERENCE] == []
