"""The Debian releases a sandbox image is made from, and the Python each one brings: a project whose
`requires-python` the default image's Python does not meet gets an image of a release whose Python does."""

from packaging.specifiers import InvalidSpecifier, SpecifierSet

from sandbox.models import DEFAULT_IMAGE

DEFAULT_SUITE = "bookworm"
# The python3 of each release, as Debian ships it (the default release first, then newer ones).
PYTHON_OF_SUITE = {"bookworm": "3.11.2", "trixie": "3.13.5"}


def image_for_suite(suite: str) -> str:
    """The sandbox image made from `suite`: the default image for the default release."""
    return DEFAULT_IMAGE if suite == DEFAULT_SUITE else f"{DEFAULT_IMAGE.rpartition(':')[0]}:{suite}"


def suite_of_image(image: str) -> str | None:
    return next((suite for suite in PYTHON_OF_SUITE if image_for_suite(suite) == image), None)


def suite_for(requires_python: str) -> str | None:
    """The first release (the default one first) whose Python meets `requires_python`; None when none does or
    the specifier is not valid (the default image is then used as it is)."""
    try:
        specifier = SpecifierSet(requires_python)
    except InvalidSpecifier:
        return None
    return next((suite for suite, python in PYTHON_OF_SUITE.items() if specifier.contains(python)), None)
