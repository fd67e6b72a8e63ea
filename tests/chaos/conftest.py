"""The `chaos` marker: `pytest -m chaos` runs only the chaos suite, `-m "not chaos"` skips it."""


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "chaos: the real bot process under faults and kills (tests/chaos)")
