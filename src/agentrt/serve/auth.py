"""Who is calling, and the per-tenant cache salt: the server's trust boundary.

Model
- Without `--auth` (only allowed on a loopback address) every caller is trusted: the tenant is
  whatever `X-Tenant-Id` (or `metadata.tenant_id`) says, default "default", and admin routes are
  open. Isolation still holds between honest tenants (salts and workflow keys differ).
- With `--auth FILE` a request must carry `Authorization: Bearer KEY`; the key names the tenant
  (an `X-Tenant-Id` header or `metadata.tenant_id` is ignored for identity and never forwarded) or
  is an admin key (`/agentrt/*`, `/metrics`). A key may be both. The file is JSON or TOML:

      {"tenants": {"sk-team-a-...": "team-a", "sk-team-b-...": "team-b"},
       "admin_keys": ["sk-admin-..."]}

  Keys are looked up by their SHA-256 digest and compared in constant time; the client's
  `Authorization` never reaches the upstream (the server's `--upstream-api-key` does).
- Tenant names are 1-64 characters of `[A-Za-z0-9._-]`.
- `cache_salt` (vLLM's per-request prefix-cache namespace) is HMAC-SHA256(secret, tenant), hex:
  never the raw tenant name, not guessable without the secret, so no client can compute another
  tenant's salt. The secret is read from a file (`--cache-salt-secret-file`), else the
  `AGENTRT_CACHE_SALT_SECRET` environment variable, else generated at start (then a restarted
  server shares no cached prefixes with its predecessor: one cold prefill per prompt).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from agentrt.wire.kvhints import TENANT_RE  # noqa: F401 - the wire contract's one definition

SECRET_ENV = "AGENTRT_CACHE_SALT_SECRET"


class AuthError(Exception):
    """A bad auth file or secret (raised at start)."""


@dataclass(frozen=True, slots=True)
class Principal:
    tenant: str | None      # None: an admin-only key (or no key without auth)
    admin: bool


@dataclass(slots=True)
class AuthConfig:
    tenants: dict = field(default_factory=dict)    # sha256(key) -> tenant
    admins: set = field(default_factory=set)       # sha256(key)

    @classmethod
    def load(cls, path: str | Path) -> "AuthConfig":
        p = Path(path)
        try:
            text = p.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise AuthError(f"--auth {p}: cannot read it: {e}") from None
        try:
            if p.suffix.lower() == ".toml":
                try:
                    import tomllib
                except ImportError:              # Python 3.10
                    raise AuthError(f"--auth {p}: TOML needs Python 3.11; use JSON") from None
                data = tomllib.loads(text)
            else:
                data = json.loads(text)
        except ValueError as e:
            raise AuthError(f"--auth {p}: not valid {'TOML' if p.suffix == '.toml' else 'JSON'}: {e}") from None
        if not isinstance(data, dict) or set(data) - {"tenants", "admin_keys"}:
            raise AuthError(f"--auth {p}: expected an object with 'tenants' {{key: tenant}} and "
                            "'admin_keys' [key, ...] only")
        tenants, admins = data.get("tenants", {}), data.get("admin_keys", [])
        if not isinstance(tenants, dict) or not isinstance(admins, list):
            raise AuthError(f"--auth {p}: 'tenants' must be an object and 'admin_keys' a list")
        cfg = cls()
        for key, tenant in tenants.items():
            _check_key(key, p)
            if not isinstance(tenant, str) or not TENANT_RE.fullmatch(tenant):
                raise AuthError(f"--auth {p}: tenant {tenant!r} must be 1-64 characters of [A-Za-z0-9._-]")
            cfg.tenants[_digest(key)] = tenant
        for key in admins:
            _check_key(key, p)
            cfg.admins.add(_digest(key))
        if not cfg.tenants and not cfg.admins:
            raise AuthError(f"--auth {p}: no keys")
        return cfg

    def principal(self, authorization: bytes | None) -> Principal | None:
        """The caller of a request with this `Authorization` header; None: no or unknown key."""
        if not authorization:
            return None
        scheme, _, key = authorization.partition(b" ")
        if scheme.lower() != b"bearer" or not key.strip():
            return None
        d = hashlib.sha256(key.strip()).digest()
        tenant = self.tenants.get(d)
        admin = d in self.admins
        if tenant is None and not admin:
            return None
        return Principal(tenant, admin)


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


def _check_key(key, p: Path) -> None:
    if not isinstance(key, str) or len(key) < 16 or not key.isascii() or not key.isprintable() or " " in key:
        raise AuthError(f"--auth {p}: keys must be printable ASCII strings of at least 16 characters "
                        "without spaces")


class Salts:
    """tenant -> cache_salt, HMAC-SHA256 of the tenant under the server's secret (memoised)."""

    def __init__(self, secret: bytes | None = None, max_entries: int = 1 << 16) -> None:
        self.secret = secret if secret else secrets.token_bytes(32)
        self.generated = not secret
        self._memo: dict[str, str] = {}
        self._max = max_entries

    @classmethod
    def from_sources(cls, path: str | None = None) -> "Salts":
        if path:
            try:
                secret = Path(path).read_bytes().strip()
            except OSError as e:
                raise AuthError(f"--cache-salt-secret-file {path}: {e}") from None
        else:
            secret = os.environ.get(SECRET_ENV, "").encode()
        if (path or secret) and len(secret) < 16:
            raise AuthError("the cache-salt secret must be at least 16 bytes")
        return cls(secret or None)

    def __call__(self, tenant: str) -> str:
        s = self._memo.get(tenant)
        if s is None:
            if len(self._memo) >= self._max:
                self._memo.clear()
            s = self._memo[tenant] = hmac.new(self.secret, b"agentrt-cache-salt\x00" + tenant.encode(),
                                              hashlib.sha256).hexdigest()
        return s


def default_unsalted(salts: Callable[[str], str]) -> Callable[[str], str | None]:
    """`salts` for a server without authentication: every named tenant its own namespace, the
    default tenant none (it shares the engine's cache with clients that reach vLLM directly)."""
    return lambda tenant: None if tenant == "default" else salts(tenant)


def tenant_scoped(tenant: str, workflow: str) -> str:
    """The workflow's key inside the server, the runtime and the engine: unique per tenant.
    The default tenant keeps ids without '/' as they are (tenant names never contain '/')."""
    if tenant == "default" and "/" not in workflow:
        return workflow
    return f"{tenant}/{workflow}"


def is_loopback(host: str) -> bool:
    import ipaddress
    if host in ("localhost", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
