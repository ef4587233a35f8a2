"""Stand-in for `triton.language` (CI only): a type marker SGLang annotates with."""


class constexpr:  # noqa: N801 - mirrors triton's name
    def __init__(self, value=None):
        self.value = value


def __getattr__(name):
    raise AttributeError(f"triton.language stub (xmemplan CI) has no attribute {name!r}")

