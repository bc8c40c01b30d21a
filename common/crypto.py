"""Symmetric encryption for secrets at rest (data source credentials, API keys).

A Fernet key is derived from settings.RIVER_ENCRYPTION_KEY with HKDF so any
string works as the configured key. Plaintext never leaves this module except to
the caller that needs it to open a connection.
"""

from __future__ import annotations

import base64
import json
from functools import lru_cache

from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings


@lru_cache(maxsize=4)
def _fernet(key_material: str) -> Fernet:
    derived = HKDF(algorithm=hashes.SHA256(), length=32, salt=b"river-secrets", info=b"fernet").derive(
        key_material.encode()
    )
    return Fernet(base64.urlsafe_b64encode(derived))


def encrypt_text(plaintext: str) -> str:
    return _fernet(settings.RIVER_ENCRYPTION_KEY).encrypt(plaintext.encode()).decode()


def decrypt_text(token: str) -> str:
    if not token:
        return ""
    try:
        return _fernet(settings.RIVER_ENCRYPTION_KEY).decrypt(token.encode()).decode()
    except InvalidToken as exc:
        raise ValueError("secret cannot be decrypted with the configured RIVER_ENCRYPTION_KEY") from exc


def encrypt_json(value: dict) -> str:
    return encrypt_text(json.dumps(value, sort_keys=True)) if value else ""


def decrypt_json(token: str) -> dict:
    return json.loads(decrypt_text(token)) if token else {}
