import re
import unicodedata

PUNCTUATION = re.compile(r"[^\w\s-]")
SPACES = re.compile(r"\s+")


def normalize_whitespace(text):
    return SPACES.sub(" ", text).strip()


def strip_punctuation(text):
    return PUNCTUATION.sub("", text)


def _ascii(text):
    return unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")


def slugify(text, separator="-"):
    """A URL slug: ASCII, lower case, words joined by `separator`."""
    words = normalize_whitespace(strip_punctuation(_ascii(text))).lower().split(" ")
    return separator.join(word for word in words if word)
