from __future__ import annotations

from typing import Any

from django.test import Client


def test_it_offers_sso_and_local_sign_in_without_sign_up(db: None, settings: Any) -> None:
    settings.SOCIALACCOUNT_PROVIDERS = {
        "openid_connect": {
            "OAUTH_PKCE_ENABLED": True,
            "APPS": [
                {
                    "provider_id": "keycloak",
                    "name": "Keycloak",
                    "client_id": "portal",
                    "secret": "s",
                    "settings": {"server_url": "https://sso.example.com/realms/ai"},
                }
            ],
        }
    }
    body = Client().get("/accounts/login/").content.decode()
    assert "Sign in with Keycloak" in body
    assert 'action="/accounts/oidc/keycloak/login/' in body
    assert "sign up" not in body.lower()
    assert "Sign Up Closed" in Client().get("/accounts/signup/").content.decode()


def test_it_signs_in_locally_and_shows_a_bad_password_inline(world: dict[str, Any]) -> None:
    client = Client()
    response = client.post("/accounts/login/", {"login": "alice", "password": "wrong"})
    assert response.status_code == 200
    assert "form-errors" in response.content.decode()
    assert "_auth_user_id" not in client.session
    response = client.post(
        "/accounts/login/", {"login": "alice", "password": "correct-horse-battery"}
    )
    assert response.status_code == 302
    assert client.session["_auth_user_id"] == str(world["alice"].pk)
