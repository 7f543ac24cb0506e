"""A 15-second soak through the real stack: every request answered, none lost or degraded."""

from __future__ import annotations

import pytest

from benchmarks import soak


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_short_soak_loses_and_degrades_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    """16 keep-alive agents for 15 s against twin + gateway + a private Redis: exit 0, i.e.
    nothing lost and no answer degraded with a healthy Redis; the RSS line is printed."""
    status = soak.main(["--seconds", "15", "--clients", "16", "--sample-s", "5"])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "lost 0  degraded 0" in out
    assert "errors 0" in out
    assert "gateway RSS MB: start" in out
