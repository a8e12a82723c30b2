"""An OpenID Connect identity provider double for the OAUTHBEARER tests: the client credentials grant
and the key set a broker verifies tokens with, on a loopback port.

``POST /token`` (``grant_type=client_credentials``, the client's id and secret by HTTP Basic or in
the form, as RFC 6749 allows) answers a JWT signed RS256 whose ``sub`` is the client id, with the
audience and issuer the broker expects; a wrong secret gets 401. ``GET /jwks`` is the public key
as a JSON Web Key Set. Kafka's ``OAuthBearerValidatorCallbackHandler`` fetches that set (the broker
must allow the URL: ``org.apache.kafka.sasl.oauthbearer.allowed.urls``) and librdkafka's ``oidc``
method the token, so both real clients of a real IdP are exercised; what is doubled is only the
IdP's user store (one client).
"""

from __future__ import annotations

import base64
import json
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

AUDIENCE: Final = "pgbridge-tests"
ISSUER: Final = "pgbridge-test-idp"
_KEY_ID: Final = "test-key-1"


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _uint(value: int) -> str:
    return _b64url(value.to_bytes((value.bit_length() + 7) // 8, "big"))


class IdentityProvider:
    """One client (``client_id``/``client_secret``); ``token_url`` and ``jwks_url`` to configure."""

    def __init__(self, client_id: str, client_secret: str) -> None:
        self.client_id = client_id
        self.client_secret = client_secret
        self.issued = 0  # tokens handed out
        self._key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path != "/jwks":
                    self._answer(404, {"error": "not_found"})
                    return
                self._answer(200, provider.key_set())

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                form = dict(urllib.parse.parse_qsl(self.rfile.read(length).decode()))
                client = provider.client_of(self.headers.get("Authorization"), form)
                if self.path != "/token" or form.get("grant_type") != "client_credentials":
                    self._answer(400, {"error": "unsupported_grant_type"})
                elif client is None:
                    self._answer(401, {"error": "invalid_client"})
                else:
                    self._answer(200, {"access_token": provider.token(client, form.get("scope")),
                                       "token_type": "Bearer", "expires_in": 3600})

            def _answer(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:  # the requests stay out of the test log
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="oidc-idp", daemon=True)
        self._thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def token_url(self) -> str:
        return f"{self.base_url}/token"

    @property
    def jwks_url(self) -> str:
        return f"{self.base_url}/jwks"

    def client_of(self, authorization: str | None, form: dict[str, str]) -> str | None:
        """The authenticated client id, or None."""
        client_id, secret = form.get("client_id"), form.get("client_secret")
        if authorization and authorization.startswith("Basic "):
            decoded = base64.b64decode(authorization[6:]).decode()
            client_id, _, secret = (urllib.parse.unquote_plus(part) for part in decoded.partition(":"))
        return client_id if client_id == self.client_id and secret == self.client_secret else None

    def key_set(self) -> dict[str, Any]:
        public = self._key.public_key().public_numbers()
        return {"keys": [{"kty": "RSA", "kid": _KEY_ID, "use": "sig", "alg": "RS256", "n": _uint(public.n),
                          "e": _uint(public.e)}]}

    def token(self, subject: str, scope: str | None) -> str:
        now = int(time.time())
        claims: dict[str, Any] = {"sub": subject, "iss": ISSUER, "aud": AUDIENCE, "iat": now, "exp": now + 3600}
        if scope:
            claims["scope"] = scope
        header = {"alg": "RS256", "typ": "JWT", "kid": _KEY_ID}
        signing_input = f"{_b64url(json.dumps(header).encode())}.{_b64url(json.dumps(claims).encode())}"
        signature = self._key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
        self.issued += 1
        return f"{signing_input}.{_b64url(signature)}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
