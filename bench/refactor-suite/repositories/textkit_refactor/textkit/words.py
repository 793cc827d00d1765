import re

WORD = re.compile(r"[A-Za-z0-9']+")


def split_words(text):
    """The words of `text`, in order."""
    return WORD.findall(text)


def count_words(text, min_length):
    """How many words of at least `min_length` characters `text` has."""
    return sum(1 for word in split_words(text) if len(word) >= min_length)
