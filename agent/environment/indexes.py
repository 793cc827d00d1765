"""Which package indexes a build may use: the host's own configuration, or what the [environment] table says.

An air-gapped site already points pip at its mirror (pip.conf, PIP_INDEX_URL, UV_* variables), trusts its own
CA and may go through a proxy; the build carries exactly that over instead of inventing an index. A wheelhouse
or indexes that are all local directories mean the build gets no network at all.
"""

from __future__ import annotations

import configparser
import json
import os
import sys
from pathlib import Path
from urllib.parse import unquote, urlsplit, urlunsplit

from pydantic import BaseModel

from agent.environment.egress import Endpoint, url_endpoint

PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy")
CA_VARIABLES = ("PIP_CERT", "UV_CERT", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE")
DEFAULT_CA_BUNDLES = (Path("/etc/ssl/certs/ca-certificates.crt"), Path("/etc/pki/tls/certs/ca-bundle.crt"))
CA_IN_BUILD = "/run/refactor-agent/ca.crt"
UV_CONFIG_IN_BUILD = "/run/refactor-agent/uv.toml"
PYPI = "https://pypi.org/simple"
PYPI_FILES_HOST = "files.pythonhosted.org"


class IndexConfig(BaseModel):
    index_url: str | None = None
    extra_index_urls: list[str] = []
    find_links: list[str] = []
    no_index: bool = False
    ca_bundle: Path | None = None
    proxies: dict[str, str] = {}
    # Host directories (local indexes, find-links, the wheelhouse) and where the build sees them, read-only.
    mounts: dict[str, str] = {}

    @property
    def offline(self) -> bool:
        """Nothing to reach over the network: the build runs with network_mode=none."""
        urls = ([self.index_url] if self.index_url else []) + self.extra_index_urls
        if self.no_index:
            return True
        return bool(urls) and self.index_url is not None and all(url.startswith("file:") for url in urls)

    def uv_config(self) -> str:
        """uv's settings file for the build (uv has no variable for --no-index); JSON strings are TOML strings."""
        lines = []
        if self.index_url:
            lines.append(f"index-url = {json.dumps(self.index_url)}")
        if self.extra_index_urls:
            lines.append(f"extra-index-url = {json.dumps(self.extra_index_urls)}")
            # pip's own rule for several indexes: the best version from any of them (uv takes the first index's).
            lines.append('index-strategy = "unsafe-best-match"')
        if self.find_links:
            lines.append(f"find-links = {json.dumps(self.find_links)}")
        if self.no_index:
            lines.append("no-index = true")
        return "\n".join(lines) + "\n"

    def allowed_endpoints(self) -> set[Endpoint]:
        """What the build may reach: each remote index's and find-links' host on its URL's port (PyPI's file host
        with PyPI), nothing with no index."""
        if self.no_index:
            return set()
        locations = [self.index_url or PYPI, *self.extra_index_urls, *self.find_links]
        endpoints = {endpoint for location in locations if (endpoint := url_endpoint(location))}
        if ("pypi.org", 443) in endpoints:
            endpoints.add((PYPI_FILES_HOST, 443))
        return endpoints

    def upstream_proxy(self) -> tuple[str | None, str]:
        """The host's own proxy for HTTPS (and its NO_PROXY): the build's connections are chained to it."""
        proxy = self.proxies.get("HTTPS_PROXY") or self.proxies.get("https_proxy")
        proxy = proxy or self.proxies.get("HTTP_PROXY") or self.proxies.get("http_proxy")
        return proxy, self.proxies.get("NO_PROXY") or self.proxies.get("no_proxy") or ""

    def build_environment(self, proxy_url: str | None) -> dict[str, str]:
        """Variables for the build's commands only (never kept in the image: URLs may hold credentials); pip's
        for lifecycle commands that call pip themselves. `proxy_url` is the build's way out, if it has one."""
        variables = {"UV_CONFIG_FILE": UV_CONFIG_IN_BUILD}
        if proxy_url is not None:
            for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
                variables[name] = proxy_url
            variables["NO_PROXY"] = variables["no_proxy"] = "localhost,127.0.0.1"
        if self.index_url:
            variables["PIP_INDEX_URL"] = self.index_url
        if self.extra_index_urls:
            variables["PIP_EXTRA_INDEX_URL"] = " ".join(self.extra_index_urls)
        if self.find_links:
            variables["PIP_FIND_LINKS"] = " ".join(self.find_links)
        if self.no_index:
            variables["PIP_NO_INDEX"] = "1"
        if self.ca_bundle is not None:
            for name in ("SSL_CERT_FILE", "PIP_CERT", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "CARGO_HTTP_CAINFO"):
                variables[name] = CA_IN_BUILD
        return variables

    def describe(self) -> str:
        """For logs and the report: where packages come from, credentials left out."""
        if self.no_index:
            return "no index, wheels from " + ", ".join(self.find_links)
        sources = [_redact(self.index_url) if self.index_url else "https://pypi.org/simple (uv's default)"]
        sources += [_redact(url) for url in self.extra_index_urls] + self.find_links
        upstream, _ = self.upstream_proxy()
        return ", ".join(sources) + (f" via proxy {_redact(upstream)}" if upstream else "")


def _redact(url: str) -> str:
    parts = urlsplit(url)
    if parts.username or parts.password:
        host = parts.hostname or ""
        return urlunsplit(parts._replace(netloc=f"***@{host}" + (f":{parts.port}" if parts.port else "")))
    return url


def _pip_config_files(environ: dict[str, str]) -> list[Path]:
    """pip's files in pip's order (later wins); PIP_CONFIG_FILE=os.devnull turns them all off, as for pip."""
    named = environ.get("PIP_CONFIG_FILE")
    if named == os.devnull:
        return []
    home = Path(environ.get("HOME", str(Path.home())))
    xdg = Path(environ.get("XDG_CONFIG_HOME", str(home / ".config")))
    files = [Path("/etc/xdg/pip/pip.conf"), Path("/etc/pip.conf"), home / ".pip/pip.conf", xdg / "pip/pip.conf"]
    files.append(Path(sys.prefix) / "pip.conf")
    if named:
        files.append(Path(named))
    return files


def _pip_settings(environ: dict[str, str]) -> dict[str, str]:
    settings: dict[str, str] = {}
    for file in _pip_config_files(environ):
        parser = configparser.RawConfigParser()
        try:
            parser.read(file, encoding="utf-8")
        except (configparser.Error, UnicodeDecodeError):
            continue
        for section in ("global", "install", "download"):
            if parser.has_section(section):
                settings.update(parser.items(section))
    for key, value in environ.items():
        if key.startswith("PIP_"):
            settings[key[4:].lower().replace("_", "-")] = value
    return settings


def _local_directory(location: str) -> Path | None:
    if location.startswith("file:"):
        return Path(unquote(urlsplit(location).path))
    return Path(location) if location.startswith("/") else None


def _mount_for(location: str) -> str | None:
    """The host directory a local index or find-links location needs: a `simple/` index links to `../files`."""
    directory = _local_directory(location)
    if directory is None or not directory.exists():
        return None
    return str(directory.parent if directory.name == "simple" else directory)


def host_index_config(environ: dict[str, str] | None = None) -> IndexConfig:
    """The host's index configuration: UV_* variables first, then pip's variables and files."""
    environ = dict(os.environ if environ is None else environ)
    pip = _pip_settings(environ)
    index_url = environ.get("UV_DEFAULT_INDEX") or environ.get("UV_INDEX_URL") or pip.get("index-url")
    extra = (environ.get("UV_INDEX") or environ.get("UV_EXTRA_INDEX_URL") or pip.get("extra-index-url") or "").split()
    find_links = (environ.get("UV_FIND_LINKS", "").replace(",", " ") or pip.get("find-links", "")).split()
    no_index = pip.get("no-index", "").lower() in ("1", "true", "yes", "on") or environ.get("UV_NO_INDEX") == "1"
    ca_bundle = next((Path(environ[name]) for name in CA_VARIABLES if environ.get(name)), None)
    ca_bundle = ca_bundle or next((path for path in DEFAULT_CA_BUNDLES if path.is_file()), None)
    # Local locations that do not exist on this host would fail the build for nothing: they are left out.
    extra = [url for url in extra if _local_directory(url) is None or _mount_for(url)]
    find_links = [location for location in find_links if _local_directory(location) is None or _mount_for(location)]
    locations = ([index_url] if index_url else []) + extra + find_links
    mounts = {mount: mount for location in locations if (mount := _mount_for(location))}
    return IndexConfig(
        index_url=index_url,
        extra_index_urls=extra,
        find_links=find_links,
        no_index=no_index,
        ca_bundle=ca_bundle if ca_bundle is not None and ca_bundle.is_file() else None,
        proxies={name: environ[name] for name in PROXY_VARIABLES if environ.get(name)},
        mounts=mounts,
    )


def with_table(host: IndexConfig, *, index_url: str | None, extra: list[str], wheelhouse: Path | None, mount: str):
    """The [environment] table's indexes replace the host's; a wheelhouse replaces every index."""
    if wheelhouse is not None:
        return IndexConfig(no_index=True, find_links=[mount], mounts={str(wheelhouse): mount})
    if index_url is None and not extra:
        return host
    locations = ([index_url] if index_url else []) + extra
    mounts = {m: m for location in locations if (m := _mount_for(location))}
    return host.model_copy(
        update={
            "index_url": index_url or host.index_url,
            "extra_index_urls": extra,
            "find_links": [],
            "mounts": mounts,
            "no_index": False,
        }
    )
