from textkit import TextStats, count_words, slugify, split_words
from textkit.report import headline


def test_words():
    assert split_words("It's a test, isn't it?") == ["It's", "a", "test", "isn't", "it"]
    assert count_words("a bb ccc", 2) == 2


def test_stats():
    stats = TextStats("Alpha beta alpha extraordinary")
    assert stats.frequencies()["alpha"] == 2
    assert stats.summary() == "4 words, 1 long"


def test_slugify():
    assert slugify("Héllo,  World!") == "hello-world"


def test_headline():
    assert headline("Big News Today", "one two") == "[big-news-today] 2 words, 0 long (3 title words)"
