"""Bounded capture of a command's output: the first and the last bytes, and a count of everything."""

HEAD_SHARE = 0.5


class OutputCapture:
    """Keeps at most `max_bytes` of output in memory however much a command prints."""

    def __init__(self, max_bytes: int) -> None:
        if max_bytes < 2:
            raise ValueError("max_bytes must be at least 2")
        self.max_bytes = max_bytes
        self.head_limit = int(max_bytes * HEAD_SHARE)
        self.tail_limit = max_bytes - self.head_limit
        self.head = bytearray()
        self.tail = bytearray()
        self.total_bytes = 0

    def add(self, chunk: bytes) -> None:
        self.total_bytes += len(chunk)
        room = self.head_limit - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk[-self.tail_limit :]
            if len(self.tail) > self.tail_limit:
                del self.tail[: len(self.tail) - self.tail_limit]

    @property
    def truncated(self) -> bool:
        return self.total_bytes > self.max_bytes

    def render(self) -> str:
        """The kept bytes as text; binary or cut-in-half characters become U+FFFD instead of failing."""
        if not self.truncated:
            return (self.head + self.tail).decode("utf-8", errors="replace")
        cut = self.total_bytes - len(self.head) - len(self.tail)
        head = self.head.decode("utf-8", errors="replace")
        tail = self.tail.decode("utf-8", errors="replace")
        return f"{head}\n[... {cut} bytes of output cut ...]\n{tail}"
