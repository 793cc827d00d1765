"""Bounding what a tool shows the model: a test run can print gigabytes, the context cannot hold them."""


def _cut_note(cut: int, total: int) -> str:
    return f"\n[... {cut} characters cut from the middle of {total} ...]\n"


def cap_text(text: str, limit: int) -> str:
    """Keep the head and the tail (errors tend to sit at the end) and say how much was cut: at most `limit`
    characters, the note included, whenever `limit` has room for the note."""
    if len(text) <= limit:
        return text
    # The note's longest form (nothing kept): the kept part is what remains of the limit after it.
    room = max(limit - len(_cut_note(len(text), len(text))), 0)
    head = room * 2 // 5
    tail = room - head
    return f"{text[:head]}{_cut_note(len(text) - head - tail, len(text))}{text[len(text) - tail :]}"
