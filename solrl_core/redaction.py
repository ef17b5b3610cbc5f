"""Credentials inside URLs: used where the URL is used, never shown or stored.

A tracking URI (`postgresql://user:pass@host/db`, `https://user:pass@mlflow.example`), PREFECT_API_URL or an S3
endpoint may carry a user and password, and a signed or keyed URL may carry its secret in the query
(`?token=...`, `X-Amz-Signature=...`). Everything solrl prints, logs to MLflow or writes into a run directory passes
through `redact` (a URL) or `redact_text` (a message that may hold URLs); the user information becomes `***` and a
secret query parameter's value `***`. `basic_auth` splits a URL's user and password off into the header an HTTP
client sends, so a URL with credentials reaches its host instead of being taken for one.
"""

from __future__ import annotations

import base64
import re
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

MASK = "***"
# query parameters whose value is a secret (lower case; a name ending in one of these is one too, e.g. X-Amz-Signature)
SECRET_QUERY_KEYS = ("password", "passwd", "pwd", "secret", "token", "key", "apikey", "api_key", "signature", "sig",
                     "credential", "credentials", "auth", "authorization", "sas", "x-amz-security-token")
# scheme://... up to whitespace or a closing quote/bracket: the URLs inside a message
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s'\"<>()\[\]{}]+")


def _secret_key(name: str) -> bool:
    name = name.lower()
    return any(name == key or name.endswith(key) or name.endswith("_" + key) for key in SECRET_QUERY_KEYS)


def redact(url: str) -> str:
    """`url` with its user information and secret query values replaced by ***; unchanged when it holds neither (or
    is not a URL)."""
    if "://" not in str(url):
        return url
    try:
        parts = urlsplit(url)
    except ValueError:  # not parseable as a URL: mask whatever stands before an @ of the authority
        return re.sub(r"://[^/@\s]*@", f"://{MASK}@", url)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{MASK}@{netloc.rsplit('@', 1)[1]}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        if any(_secret_key(k) for k, _ in pairs):
            query = urlencode([(k, MASK if _secret_key(k) else v) for k, v in pairs], safe="*")
    if netloc == parts.netloc and query == parts.query:
        return url
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def redact_text(text: str) -> str:
    """Every URL inside `text` redacted (`redact`)."""
    return _URL.sub(lambda m: redact(m.group(0)), str(text))


def redact_tree(value):
    """A config-like tree (dicts, lists, strings) with every string redacted (`redact_text`)."""
    if isinstance(value, dict):
        return {k: redact_tree(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(redact_tree(v) for v in value)
    return redact_text(value) if isinstance(value, str) else value


def basic_auth(url: str) -> tuple[str, dict[str, str]]:
    """(`url` without its user information, the `Authorization: Basic` header its user and password make; {} when it
    has none), for HTTP clients that do not read credentials from the URL."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url, {}
    host = parts.netloc.rsplit("@", 1)[1]
    user, password = unquote(parts.username or ""), unquote(parts.password or "")
    return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment)), basic_header(f"{user}:{password}")


def basic_header(credentials: str) -> dict[str, str]:
    """The `Authorization: Basic` header of `user:password`."""
    return {"Authorization": "Basic " + base64.b64encode(credentials.encode()).decode("ascii")}
