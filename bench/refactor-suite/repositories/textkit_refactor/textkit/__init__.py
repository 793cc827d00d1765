from textkit.cleaning import normalize_whitespace, slugify, strip_punctuation
from textkit.stats import TextStats
from textkit.words import count_words, split_words

__all__ = ["TextStats", "count_words", "normalize_whitespace", "slugify", "split_words", "strip_punctuation"]
