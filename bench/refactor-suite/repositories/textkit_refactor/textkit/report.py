from textkit.cleaning import slugify
from textkit.stats import TextStats
from textkit.words import count_words


def headline(title, body):
    stats = TextStats(body)
    return f"[{slugify(title)}] {stats.summary()} ({count_words(title, 3)} title words)"
