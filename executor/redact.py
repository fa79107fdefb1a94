"""Secret redaction applied to everything before it reaches the audit log.

Two sources of secrets are recognised:

- values of host environment variables whose *names* look like credentials (`*_KEY`,
  `*TOKEN*`, `*SECRET*`, `*PASSWORD*`, `*PASSWD*`, `*CREDENTIAL*`, ...), at least
  `MIN_SECRET_LENGTH` characters long so that values like `1` or `true` are not
  replaced everywhere; plus any names and literal values the caller adds;
- common token shapes anywhere in a string (`TOKEN_SHAPES`, listed in docs/AUDIT.md: OpenAI,
  Anthropic, Stripe, GitHub, GitLab, AWS, Google, Slack, npm, PyPI, Hugging Face, and more;
  `Bearer …`, PEM private keys, JWTs, `user:password@` in URLs, `NAME_TOKEN=value`).

An env secret is also found reversed, base64-encoded (standard and URL-safe, with or without
padding) and hex-encoded (either case): the usual ways a command turns it into other bytes.

A match is replaced by `[REDACTED:<kind>]`, e.g. `[REDACTED:env:OPENAI_API_KEY]` or
`[REDACTED:github-token]`; the kind never contains secret material. Dict values under
secret-looking keys (`{"api_key": "…"}`) are replaced whole, whatever their length.
"""

from __future__ import annotations

import base64
import functools
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

MIN_SECRET_LENGTH = 6
"""Shorter env values are not redacted (they would match everywhere and protect nothing)."""

SECRET_NAME = re.compile(
    r"(?:^|_)(?:API)?KEY$|APIKEY|ACCESS_?KEY|PRIVATE_?KEY|TOKEN(?!S)|SECRET|PASSWORD|PASSWD"
    r"|CREDENTIAL|(?:^|_)PAT$|(?:^|_)AUTH$",
    re.IGNORECASE,
)
"""Environment variable / argument names whose values are treated as secrets."""

# (kind, pattern): when the pattern has a group named "secret", only that group is replaced.
# Distinctive prefixes (ghp_, AKIA, xox?-) match even glued to other text; short generic
# ones (sk-, eyJ) need a word boundary, or "task-…" would be redacted.
TOKEN_SHAPES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("private-key", re.compile(
        r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\Z)"
    )),
    ("openai-key", re.compile(r"\bsk-(?:proj-|ant-|svcacct-|or-v1-)?[A-Za-z0-9_\-]{20,}")),
    ("stripe-key", re.compile(r"\b(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}")),
    ("github-token", re.compile(r"(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{22,})")),
    ("gitlab-token", re.compile(r"\bgl(?:pat|dt|rt|ptt|cbt|oas)-[A-Za-z0-9_\-]{20,}")),
    ("aws-access-key", re.compile(r"(?:AKIA|ASIA)[0-9A-Z]{16}(?![0-9A-Z])")),
    ("google-api-key", re.compile(r"AIza[0-9A-Za-z_\-]{35}")),
    ("google-oauth-token", re.compile(r"\bya29\.[0-9A-Za-z_\-]{20,}")),
    ("slack-token", re.compile(r"xox[abposr]-[A-Za-z0-9\-]{10,}")),
    ("slack-webhook", re.compile(r"hooks\.slack\.com/services/[A-Za-z0-9/]{20,}")),
    ("npm-token", re.compile(r"\bnpm_[A-Za-z0-9]{36}")),
    ("pypi-token", re.compile(r"\bpypi-AgE[A-Za-z0-9_\-]{50,}")),
    ("huggingface-token", re.compile(r"\bhf_[A-Za-z0-9]{30,}")),
    ("groq-key", re.compile(r"\bgsk_[A-Za-z0-9]{40,}")),
    ("replicate-token", re.compile(r"\br8_[A-Za-z0-9]{30,}")),
    ("xai-key", re.compile(r"\bxai-[A-Za-z0-9]{40,}")),
    ("perplexity-key", re.compile(r"\bpplx-[A-Za-z0-9]{40,}")),
    ("digitalocean-token", re.compile(r"\bdo[por]_v1_[a-f0-9]{64}")),
    ("shopify-token", re.compile(r"\bshp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}")),
    ("sendgrid-key", re.compile(r"\bSG\.[A-Za-z0-9_\-]{16,}\.[A-Za-z0-9_\-]{16,}")),
    ("twilio-key", re.compile(r"\bSK[0-9a-f]{32}\b")),
    ("databricks-token", re.compile(r"\bdapi[0-9a-f]{32}")),
    ("telegram-bot-token", re.compile(r"\b\d{8,10}:AA[A-Za-z0-9_\-]{33}")),
    ("jwt", re.compile(r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]*")),
    ("bearer", re.compile(r"(?i)\bBearer\s+(?P<secret>[A-Za-z0-9._~+/=\-]{8,})")),
    ("url-credentials", re.compile(r"://(?P<secret>[^/\s:@]+:[^/\s@]+)@")),
    ("assignment", re.compile(
        r"(?i)\b[A-Z0-9_]*(?:KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIALS?)['\"]?\s*[=:]\s*['\"]?"
        r"(?!\[REDACTED:)(?P<secret>[^\s'\",;]{6,})"
    )),
)


_CACHED_LENGTH = 256
_CACHED_STRINGS = 4096
"""Strings up to _CACHED_LENGTH characters are redacted once and remembered (a few thousand)."""

SHAPE_NEEDLES: dict[str, tuple[str, ...]] = {
    "private-key": ("private key-----",), "openai-key": ("sk-",),
    "stripe-key": ("_live_", "_test_"),
    "github-token": ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
    "gitlab-token": ("glpat-", "gldt-", "glrt-", "glptt-", "glcbt-", "gloas-"),
    "aws-access-key": ("akia", "asia"), "google-api-key": ("aiza",),
    "google-oauth-token": ("ya29.",), "slack-token": ("xox",),
    "slack-webhook": ("hooks.slack.com/services/",), "npm-token": ("npm_",),
    "pypi-token": ("pypi-age",), "huggingface-token": ("hf_",), "groq-key": ("gsk_",),
    "replicate-token": ("r8_",), "xai-key": ("xai-",), "perplexity-key": ("pplx-",),
    "digitalocean-token": ("_v1_",), "shopify-token": ("shp",), "sendgrid-key": ("sg.",),
    "twilio-key": ("sk",), "databricks-token": ("dapi",), "telegram-bot-token": (":aa",),
    "jwt": ("eyj",), "bearer": ("bearer",), "url-credentials": ("://",),
    "assignment": ("key", "token", "secret", "passw", "credential"),
}
"""Per token shape, lower-case strings one of which every match contains: a text without any
(case-folded) is not searched for that shape (the patterns cost about 0.4 ms a KB of text
together). A shape missing here is always searched."""
_ANY_NEEDLE = re.compile("|".join(re.escape(n) for ns in SHAPE_NEEDLES.values() for n in ns))
"""Whether a folded text holds any needle: most texts hold none (one search, not 27)."""
_UNNEEDLED = tuple((kind, pattern) for kind, pattern in TOKEN_SHAPES if kind not in SHAPE_NEEDLES)
"""The shapes searched whatever the text holds."""

SPLIT_MIN_LENGTH = 12
"""Secrets at least this long are also found with separators inserted between characters."""
_SEP = r"(?:[\s\-_.,:;|/\\]{0,3})"


def encodings(value: str) -> list[str]:
    """`value` and the forms a command easily turns it into: reversed, base64, hex."""
    raw = value.encode("utf-8", "surrogatepass")
    b64 = [base64.b64encode(raw).decode(), base64.urlsafe_b64encode(raw).decode()]
    forms = [value, value[::-1], *b64, *(b.rstrip("=") for b in b64), raw.hex(), raw.hex().upper()]
    return list(dict.fromkeys(f for f in forms if f))


def marker(kind: str) -> str:
    """The text that replaces a secret of `kind`."""
    return f"[REDACTED:{kind}]"


@functools.lru_cache(maxsize=4096)  # audit records repeat their few dozen keys
def is_secret_name(name: str) -> bool:
    """Whether an env var / argument / key name looks like it holds a credential."""
    return bool(SECRET_NAME.search(name.replace("-", "_")))


class Redactor:
    """Replaces secrets in strings and, recursively, in dicts and lists."""

    def __init__(
        self,
        env: Mapping[str, str] | None = None,
        *,
        extra_names: Iterable[str] = (),
        secrets: Iterable[str] = (),
        min_length: int = MIN_SECRET_LENGTH,
    ) -> None:
        extra = set(extra_names)
        plain = [(f"env:{name}", value) for name, value in (env or {}).items()
                 if (name in extra or is_secret_name(name)) and len(value) >= min_length]
        plain += [("secret", value) for value in secrets if len(value) >= min_length]
        pairs = [(kind, form) for kind, value in plain for form in encodings(value)]
        # Longest first, so a secret containing another is replaced whole.
        pairs.sort(key=lambda p: len(p[1]), reverse=True)
        self._kinds = {value: kind for kind, value in reversed(pairs)}
        self._literal = (
            re.compile("|".join(re.escape(v) for _, v in pairs)) if pairs else None
        )
        # The plain values again, with a few separator characters allowed between any two of
        # their characters: `fold -w 10`, `sed 's/./&-/g'` or a wrapped line split a secret.
        self._split = [(kind, re.compile(_SEP.join(re.escape(c) for c in value)))
                       for kind, value in plain if len(value) >= SPLIT_MIN_LENGTH]
        self._done: dict[str, str] = {}

    @classmethod
    def from_environ(cls, *, extra_names: Iterable[str] = ()) -> Redactor:
        """A redactor for the current process environment."""
        return cls(dict(os.environ), extra_names=extra_names)

    def text(self, value: str) -> str:
        """`value` with every known secret and token shape replaced."""
        if len(value) > _CACHED_LENGTH:
            return self._text(value)
        done = self._done.get(value)
        if done is None:  # names, paths, kinds: an audit record repeats most of its strings
            if len(self._done) >= _CACHED_STRINGS:
                self._done.clear()
            done = self._done[value] = self._text(value)
        return done

    def _text(self, value: str, *, prefilter: bool = True) -> str:
        if self._literal is not None:
            value = self._literal.sub(lambda m: marker(self._kinds[m.group(0)]), value)
        for kind, split in self._split:
            value = split.sub(marker(kind), value)
        low = _folded(value)
        shapes = TOKEN_SHAPES
        if prefilter and not _ANY_NEEDLE.search(low):  # no needle at all (the common case)
            shapes = _UNNEEDLED
        for kind, pattern in shapes:
            needles = SHAPE_NEEDLES.get(kind) if prefilter else None
            if needles is not None and not any(needle in low for needle in needles):
                continue  # no match can be there: the text lacks what every match holds
            done = pattern.sub(functools.partial(_replace, kind=kind), value)
            if done != value:
                value, low = done, _folded(done)
        return value

    def value(self, value: Any) -> Any:
        """Redact strings inside any JSON-like structure (other values are returned as is)."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):
            return {k: self._item(str(k), v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.value(v) for v in value]
        return value

    def argv(self, argv: Sequence[str]) -> list[str]:
        """Command-line arguments with the values of secret-named options replaced."""
        out: list[str] = []
        hide_next = False
        for arg in argv:
            if hide_next:
                out.append(marker("argument"))
                hide_next = False
            elif arg.startswith("-") and "=" in arg and is_secret_name(arg.split("=", 1)[0]):
                out.append(arg.split("=", 1)[0] + "=" + marker("argument"))
            else:
                hide_next = arg.startswith("-") and is_secret_name(arg.lstrip("-"))
                out.append(self.text(arg))
        return out

    def _item(self, key: str, value: Any) -> Any:
        if isinstance(value, str) and value and is_secret_name(key):
            return marker(f"key:{key}")
        return self.value(value)


def _folded(text: str) -> str:
    """`text` case-folded as the shapes' needles are, so that whatever a case-insensitive
    pattern takes for an ASCII letter is that letter here (re also takes dotless i for i)."""
    return text.casefold().replace("\u0131", "i")


def _replace(match: re.Match[str], kind: str) -> str:
    if "secret" not in match.re.groupindex:
        return marker(kind)
    start, end = match.span("secret")
    whole = match.group(0)
    offset = match.start()
    return whole[: start - offset] + marker(kind) + whole[end - offset :]
