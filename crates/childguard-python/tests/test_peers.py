"""A missing peer fails the test and says what to install; it is skipped only when
CHILDGUARD_SKIP_PEERS=1 asks for it."""

import pytest
from conftest import need


def test_a_missing_peer_fails_saying_what_to_install(monkeypatch):
    monkeypatch.delenv("CHILDGUARD_SKIP_PEERS", raising=False)
    with pytest.raises(pytest.fail.Exception) as caught:
        need("frobd", ["/nonexistent/frobd"], "apt-get install -y frobd")
    assert "needs frobd: install with `apt-get install -y frobd`" in str(caught.value)


def test_a_missing_peer_is_skipped_only_when_asked(monkeypatch):
    monkeypatch.setenv("CHILDGUARD_SKIP_PEERS", "1")
    with pytest.raises(pytest.skip.Exception):
        need("frobd", ["/nonexistent/frobd"], "apt-get install -y frobd")
