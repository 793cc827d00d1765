from collections import Counter

import textkit.words as w


class TextStats:
    def __init__(self, text):
        self.text = text

    def frequencies(self):
        return Counter(word.lower() for word in w.split_words(self.text))

    def long_words(self):
        return w.count_words(self.text, 7)

    def summary(self):
        return f"{w.count_words(self.text, 1)} words, {self.long_words()} long"
