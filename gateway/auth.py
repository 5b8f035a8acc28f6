"""Credentials: the admin token, an optional grader token, and per-rollout keys minted from a stored secret.

A rollout key embeds its rollout id, the attempt it was minted for and an HMAC of both, so checking a key needs no
database read, a key for another rollout is recognised (403, not 401), and the same key is returned when creation is
retried during one attempt. The routes compare the key's attempt with the rollout's current one (cached): after a
requeue, the previous attempt's key records nothing more (409).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from dataclasses import dataclass
from enum import StrEnum

from gateway.errors import Conflict, Forbidden, Unauthorized
from gateway.records import RolloutState

KEY_PREFIX = "hrl"
VERIFIED_KEYS_KEPT = 65_536
"""Rollout keys an `Authenticator` remembers as verified (a key is checked once, not on every call of its attempt);
past this many the memory is emptied and refilled."""


class Role(StrEnum):
    """What a credential may do."""

    ADMIN = "admin"
    GRADER = "grader"
    ROLLOUT = "rollout"


@dataclass(frozen=True)
class Principal:
    """An authenticated caller."""

    role: Role  # what the credential may do
    rollout_id: str | None = None  # the rollout a rollout key belongs to
    attempt: int | None = None  # the attempt a rollout key was minted for


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _mac(secret: bytes, rollout_id: str, attempt: int) -> str:
    message = b"rollout-key:" + rollout_id.encode() + b":" + str(attempt).encode()
    return _b64(hmac.digest(secret, message, hashlib.sha256)[:24])


def mint_rollout_key(secret: bytes, rollout_id: str, attempt: int) -> str:
    """The key of one attempt of a rollout: `hrl.<id>.<attempt>.<mac>` (deterministic: a retried creation gets the
    same key back while the attempt is the same)."""
    return f"{KEY_PREFIX}.{_b64(rollout_id.encode())}.{attempt}.{_mac(secret, rollout_id, attempt)}"


def rollout_of_key(secret: bytes, key: str) -> tuple[str, int] | None:
    """(rollout id, attempt) of a valid key, or None for anything forged or malformed."""
    parts = key.split(".")
    if len(parts) != 4 or parts[0] != KEY_PREFIX or not parts[2].isascii() or not parts[2].isdigit():
        return None
    try:
        rollout_id = _unb64(parts[1]).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None
    attempt = int(parts[2])
    if str(attempt) != parts[2] or not hmac.compare_digest(parts[3], _mac(secret, rollout_id, attempt)):
        return None
    return rollout_id, attempt


def check_key_attempt(principal: Principal, rollout_id: str, state: RolloutState, attempt: int, *,
                      live: bool = True) -> None:
    """Conflict (409 `stale_attempt`) when a rollout key is not for the rollout's current attempt or, with `live`
    (writes), when that attempt (>= 1) is over (requeued or finished). Admin and grader credentials pass."""
    if principal.role != Role.ROLLOUT:
        return
    if principal.attempt != attempt:
        raise Conflict(f"this key belongs to attempt {principal.attempt} of rollout {rollout_id!r}, whose current "
                       f"attempt is {attempt}; only the key of the current attempt is accepted (the controller "
                       "hands it to the harness it starts)", code="stale_attempt")
    if live and attempt > 0 and state != RolloutState.RUNNING:
        raise Conflict(f"attempt {attempt} of rollout {rollout_id!r} is over (the rollout is {state}); its key "
                       "records nothing more", code="stale_attempt")


def bearer(authorization: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header."""
    if not authorization:
        return None
    scheme, _, token = authorization.partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


def harness_authorization(authorization: str | None, api_key: str | None) -> str | None:
    """The credential of a harness call as an Authorization value: the `Authorization` header, else Anthropic's
    `x-api-key` header (`x-api-key: <key>` is `Authorization: Bearer <key>`)."""
    if authorization:
        return authorization
    return f"Bearer {api_key.strip()}" if api_key and api_key.strip() else None


class Authenticator:
    """Maps a bearer token to a Principal."""

    def __init__(self, admin_token: str, grader_token: str | None, secret: bytes) -> None:
        if not admin_token:
            raise ValueError("the admin token is empty; set HARNESSRL_ADMIN_TOKEN")
        self._admin = admin_token.encode()
        self._grader = grader_token.encode() if grader_token else None
        self._secret = secret
        self._verified: dict[str, tuple[str, int]] = {}  # rollout key -> its (rollout id, attempt), checked once

    def identify(self, authorization: str | None) -> Principal:
        """Who is calling; raises Unauthorized for a missing or unknown credential."""
        token = bearer(authorization)
        if token is None:
            raise Unauthorized("missing credential: send 'Authorization: Bearer <key>' (or, on the harness paths, "
                               "'x-api-key: <key>')")
        raw = token.encode()
        if hmac.compare_digest(raw, self._admin):
            return Principal(Role.ADMIN)
        if self._grader is not None and hmac.compare_digest(raw, self._grader):
            return Principal(Role.GRADER)
        owner = self._rollout_of_key(token)
        if owner is None:
            raise Unauthorized("invalid credential: not an admin token, grader token or rollout key")
        return Principal(Role.ROLLOUT, *owner)

    def _rollout_of_key(self, token: str) -> tuple[str, int] | None:
        """`rollout_of_key` of the secret, remembered for valid keys (a forged one is checked every time)."""
        owner = self._verified.get(token)
        if owner is None:
            owner = rollout_of_key(self._secret, token)
            if owner is not None:
                if len(self._verified) >= VERIFIED_KEYS_KEPT:
                    self._verified.clear()
                self._verified[token] = owner
        return owner

    def require_rollout(self, authorization: str | None, rollout_id: str) -> Principal:
        """Allow the rollout's own key (or the admin); another rollout's key is Forbidden."""
        principal = self.identify(authorization)
        if principal.role == Role.ADMIN or principal.rollout_id == rollout_id:
            return principal
        if principal.role == Role.ROLLOUT:
            raise Forbidden("this key belongs to another rollout; use the key returned when this rollout was created")
        raise Forbidden(f"a {principal.role} credential cannot call a rollout's proxy")

    def require(self, authorization: str | None, *roles: Role) -> Principal:
        """Allow only the given roles (admin always)."""
        principal = self.identify(authorization)
        if principal.role == Role.ADMIN or principal.role in roles:
            return principal
        raise Forbidden(f"a {principal.role} credential may not do this; it needs {' or '.join(['admin', *roles])}")
