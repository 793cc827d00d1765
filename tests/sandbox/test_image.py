"""Reaching the daemon, the image checks, and building the sandbox image for real (no registry needed)."""

import contextlib
import io
import secrets
import tarfile
from collections.abc import Iterator
from pathlib import Path

import docker
import docker.errors
import pytest
from typer.testing import CliRunner

from sandbox import (
    DEFAULT_IMAGE,
    DockerUnavailable,
    ImageMissing,
    SandboxError,
    build_image,
    docker_client,
    require_image,
)
from sandbox.cli import sandbox_app
from sandbox.image import ROOTFS_IMAGE, bootstrap_base_image, import_rootfs
from sandbox.mirrors import DEBOOTSTRAP_DEFAULT_MIRROR, choose_mirror, configured_mirrors, mirror_hosts

PACKAGE_CHECK = "python3 -m pytest --version && git --version && timeout --version && bash --version && less --version"


# --- no Docker needed ---


def test_a_dead_daemon_socket_is_one_clear_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    address = f"unix://{tmp_path}/docker.sock"
    monkeypatch.setenv("DOCKER_HOST", address)
    with pytest.raises(DockerUnavailable) as caught:
        docker_client()
    message = str(caught.value)
    assert message.startswith(f"Docker daemon unreachable at {address}: ")
    assert "\n" not in message


def test_bootstrap_and_base_exclude_each_other() -> None:
    with pytest.raises(SandboxError, match="either --bootstrap or --base"):
        build_image("refactor-agent-sandbox:never", base="debian:bookworm-slim", bootstrap=True)


def test_cli_reports_errors_in_one_line_without_traceback() -> None:
    result = CliRunner().invoke(sandbox_app, ["build", "--bootstrap", "--base", "debian:bookworm-slim"])
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        "error: choose either --bootstrap or --base: bootstrapping makes its own base"
    ]


def test_an_unknown_debian_release_is_one_line_naming_the_known_ones() -> None:
    result = CliRunner().invoke(sandbox_app, ["build", "--suite", "buster"])
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        "error: unknown Debian release 'buster': choose one of bookworm, trixie"
    ]


def _write_apt_sources(apt_dir: Path) -> None:
    (apt_dir / "sources.list.d").mkdir(parents=True)
    (apt_dir / "sources.list").write_text(
        "# a comment\n"
        "deb [signed-by=/usr/share/keyrings/k.gpg] http://mirror.example/debian/ bookworm main\n"
        "deb http://mirror.example/debian bookworm-updates main\n"
        "deb-src http://src.example/debian bookworm main\n"
    )
    (apt_dir / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\nURIs: http://other.example/debian\nSuites: bookworm bookworm-updates\nComponents: main\n\n"
        "Types: deb\nURIs: http://security.example/debian-security\nSuites: bookworm-security\n"
    )


def test_configured_mirrors_are_read_from_both_source_formats(tmp_path: Path) -> None:
    _write_apt_sources(tmp_path)
    assert configured_mirrors("bookworm", tmp_path) == ["http://mirror.example/debian", "http://other.example/debian"]


def test_the_hosts_a_build_may_fetch_debian_packages_from_are_the_mirrors_choose_mirror_picks_among(
    tmp_path: Path,
) -> None:
    _write_apt_sources(tmp_path)
    assert mirror_hosts(["bookworm"], tmp_path) == ["deb.debian.org:80", "mirror.example:80", "other.example:80"]
    assert mirror_hosts(["trixie"], tmp_path) == ["deb.debian.org:80"]


def test_the_default_mirror_is_preferred_when_it_answers(tmp_path: Path) -> None:
    _write_apt_sources(tmp_path)
    assert choose_mirror("bookworm", apt_dir=tmp_path, answers=lambda _m, _s: True) == DEBOOTSTRAP_DEFAULT_MIRROR


def test_a_configured_mirror_is_used_when_the_default_does_not_answer(tmp_path: Path) -> None:
    _write_apt_sources(tmp_path)
    answering = {"http://other.example/debian"}
    assert choose_mirror("bookworm", apt_dir=tmp_path, answers=lambda m, _s: m in answering) == (
        "http://other.example/debian"
    )


def test_no_answering_mirror_is_a_clear_error(tmp_path: Path) -> None:
    _write_apt_sources(tmp_path)
    with pytest.raises(SandboxError, match=r"no Debian mirror answers for 'bookworm' \(tried http://deb"):
        choose_mirror("bookworm", apt_dir=tmp_path, answers=lambda _m, _s: False)


# --- real Docker ---


@pytest.fixture(scope="module")
def client() -> docker.DockerClient:
    return docker_client()


def _run(client: docker.DockerClient, image: str, command: str) -> str:
    output = client.containers.run(image, ["sh", "-c", command], network_mode="none", remove=True)
    return output.decode()


@pytest.mark.docker
def test_a_missing_image_names_the_build_command(client: docker.DockerClient) -> None:
    with pytest.raises(ImageMissing) as caught:
        require_image(client, "refactor-agent-sandbox:no-such-tag")
    assert str(caught.value) == (
        "sandbox image 'refactor-agent-sandbox:no-such-tag' not found: "
        "build it with `refactor-agent sandbox build --bootstrap`"
    )


@pytest.mark.docker
def test_a_root_filesystem_is_imported_as_an_image(client: docker.DockerClient, tmp_path: Path) -> None:
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "hello").write_text("from the rootfs\n")
    tag = f"refactor-agent-sandbox-test-import:{secrets.token_hex(4)}"
    import_rootfs(client, tmp_path, tag)
    try:
        assert "LANG=C.UTF-8" in client.images.get(tag).attrs["Config"]["Env"]
        # Nothing in this root filesystem can run: read the file back without starting the container.
        container = client.containers.create(tag, ["none"])
        archive, _ = container.get_archive("/etc/hello")
        container.remove()
        with tarfile.open(fileobj=io.BytesIO(b"".join(archive))) as tar:
            member = tar.extractfile("hello")
            assert member is not None and member.read() == b"from the rootfs\n"
    finally:
        client.images.remove(tag, force=True)


@pytest.mark.docker
def test_a_missing_root_filesystem_is_a_clear_error(client: docker.DockerClient, tmp_path: Path) -> None:
    with pytest.raises(SandboxError, match=r"tar of .* failed"):
        import_rootfs(client, tmp_path / "absent", "refactor-agent-sandbox-test-import:never")


@pytest.mark.docker
@pytest.mark.bootstrap
def test_debootstrap_makes_an_image_that_runs_offline(client: docker.DockerClient) -> None:
    # The whole offline path, never served from an image made before: a minimal root filesystem (minbase and
    # one small package, to prove `packages` reach debootstrap) under a tag of its own.
    tag = f"refactor-agent-sandbox-test-bootstrap:{secrets.token_hex(4)}"
    try:
        bootstrap_base_image(client, tag, packages=("procps",), log=print)
        output = _run(client, tag, "cat /etc/debian_version && ps --version")
    finally:
        with contextlib.suppress(docker.errors.ImageNotFound):
            client.images.remove(tag, force=True)
    release, tools = output.splitlines()
    assert release.startswith("12.")
    assert tools.startswith("ps from procps-ng")


@pytest.fixture(scope="module")
def bootstrapped_base(client: docker.DockerClient) -> str:
    """The debootstrap-made base; bootstrapped here for real unless an earlier build already made it."""
    try:
        client.images.get(ROOTFS_IMAGE)
    except docker.errors.ImageNotFound:
        # A tag of its own: the user's sandbox image is left as it is.
        tag = f"refactor-agent-sandbox:test-bootstrap-{secrets.token_hex(4)}"
        build_image(tag, bootstrap=True)
        client.images.remove(tag)
    return ROOTFS_IMAGE


@pytest.mark.docker
def test_the_bootstrapped_base_has_the_tools(client: docker.DockerClient, bootstrapped_base: str) -> None:
    output = _run(client, bootstrapped_base, PACKAGE_CHECK)
    assert "pytest 7" in output
    assert "git version 2" in output
    assert "GNU coreutils" in output
    assert any(line.startswith("less ") for line in output.splitlines())  # the pager suites page through


@pytest.fixture
def fresh_base(client: docker.DockerClient, bootstrapped_base: str) -> Iterator[str]:
    """The bootstrapped base with one file more: a new image id, so no build step can come from the cache."""
    container = client.containers.run(
        bootstrapped_base, ["sh", "-c", "date +%s%N > /etc/refactor-agent-test-base"], network_mode="none", detach=True
    )
    container.wait()
    tag = f"refactor-agent-sandbox-test-base:{secrets.token_hex(4)}"
    container.commit(*tag.split(":"))
    container.remove()
    yield tag
    client.images.remove(tag, force=True)


@pytest.mark.docker
def test_the_dockerfile_builds_from_a_given_base(client: docker.DockerClient, fresh_base: str) -> None:
    tag = f"refactor-agent-sandbox:test-{secrets.token_hex(4)}"
    lines: list[str] = []
    try:
        build_image(tag, base=fresh_base, log=lines.append)
        image = client.images.get(tag)
        assert image.attrs["Config"]["WorkingDir"] == "/workspace"
        assert image.attrs["Config"]["Cmd"] == ["sleep", "infinity"]
        output = _run(client, tag, f"cat /etc/refactor-agent-test-base && {PACKAGE_CHECK} && git config --system -l")
        assert "pytest 7" in output
        assert "safe.directory=*" in output
        assert any("Running in" in line for line in lines), "the RUN step came from the cache"
    finally:
        client.images.remove(tag, force=True)


@pytest.mark.docker
def test_the_default_image_has_the_tools(client: docker.DockerClient) -> None:
    require_image(client, DEFAULT_IMAGE)
    output = _run(client, DEFAULT_IMAGE, f"{PACKAGE_CHECK} && pwd")
    assert "pytest 7" in output
    assert "git version 2" in output
    assert any(line.startswith("less ") for line in output.splitlines())
    assert output.splitlines()[-1] == "/workspace"
