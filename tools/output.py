"""Bounding what a tool shows the model: a test run can print gigabytes, the context cannot hold them."""


def cap_text(text: str, limit: int) -> str:
    """Keep the head and the tail (errors tend to sit at the end) and say how much was cut."""
    if len(text) <= limit:
        return text
    head = limit * 2 // 5
    tail = limit - head
    cut = len(text) - head - tail
    return f"{text[:head]}\n[... {cut} characters cut from the middle of {len(text)} ...]\n{text[-tail:]}"
