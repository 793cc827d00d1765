"""Choosing a Debian mirror for debootstrap: its default first, then the ones apt is configured with."""

import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from sandbox.errors import SandboxError

DEBOOTSTRAP_DEFAULT_MIRROR = "http://deb.debian.org/debian"
APT_CONFIG_DIR = Path("/etc/apt")


def _one_line_entries(text: str) -> Iterator[tuple[str, list[str]]]:
    """(uri, [suite]) of each `deb URI SUITE COMPONENTS...` line."""
    for line in text.splitlines():
        words = line.split("#", 1)[0].split()
        if len(words) < 3 or words[0] != "deb":
            continue
        # An options block like `[signed-by=...]` sits between `deb` and the URI.
        rest = words[1:]
        if rest[0].startswith("["):
            while rest and not rest[0].endswith("]"):
                rest = rest[1:]
            rest = rest[1:]
        if len(rest) >= 2:
            yield rest[0], [rest[1]]


def _deb822_entries(text: str) -> Iterator[tuple[str, list[str]]]:
    """(uri, suites) of each stanza of a `.sources` file whose Types include `deb`."""
    for stanza in text.split("\n\n"):
        fields: dict[str, str] = {}
        for line in stanza.splitlines():
            if line.startswith("#") or ":" not in line or line[:1].isspace():
                continue
            key, value = line.split(":", 1)
            fields[key.strip().lower()] = value.strip()
        if "deb" not in fields.get("types", "").split():
            continue
        for uri in fields.get("uris", "").split():
            yield uri, fields.get("suites", "").split()


def configured_mirrors(suite: str, apt_dir: Path = APT_CONFIG_DIR) -> list[str]:
    """URIs that apt on this machine uses for `suite` itself (not its -updates or -security)."""
    sources: list[Path] = []
    if (apt_dir / "sources.list").is_file():
        sources.append(apt_dir / "sources.list")
    sources += sorted((apt_dir / "sources.list.d").glob("*.list"))
    sources += sorted((apt_dir / "sources.list.d").glob("*.sources"))
    mirrors: list[str] = []
    for path in sources:
        text = path.read_text(errors="replace")
        entries = _deb822_entries(text) if path.suffix == ".sources" else _one_line_entries(text)
        for uri, suites in entries:
            uri = uri.rstrip("/")
            if suite in suites and uri not in mirrors:
                mirrors.append(uri)
    return mirrors


def mirror_answers(mirror: str, suite: str, *, timeout_s: float = 15) -> bool:
    request = urllib.request.Request(f"{mirror}/dists/{suite}/Release", method="HEAD")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def choose_mirror(
    suite: str,
    *,
    apt_dir: Path = APT_CONFIG_DIR,
    answers: Callable[[str, str], bool] = mirror_answers,
) -> str:
    candidates = [DEBOOTSTRAP_DEFAULT_MIRROR]
    candidates += [uri for uri in configured_mirrors(suite, apt_dir) if uri != DEBOOTSTRAP_DEFAULT_MIRROR]
    for mirror in candidates:
        if answers(mirror, suite):
            return mirror
    raise SandboxError(f"no Debian mirror answers for {suite!r} (tried {', '.join(candidates)})")


def mirror_hosts(suites: Sequence[str], apt_dir: Path = APT_CONFIG_DIR) -> list[str]:
    """`host:port` of each mirror an image bootstrapped here fetches its Debian packages from: debootstrap's
    default mirror and the ones apt is configured with (choose_mirror picks among them)."""
    uris = [DEBOOTSTRAP_DEFAULT_MIRROR, *(uri for suite in suites for uri in configured_mirrors(suite, apt_dir))]
    addresses = (urllib.parse.urlsplit(uri) for uri in uris)
    return sorted({f"{a.hostname}:{a.port or (443 if a.scheme == 'https' else 80)}" for a in addresses if a.hostname})
