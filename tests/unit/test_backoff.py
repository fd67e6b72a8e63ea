import random

from storage.jobs import backoff_delay


def test_backoff_grows_exponentially_and_is_capped():
    rand = random.Random(1)
    upper = [backoff_delay(n, 2.0, 60.0, _Max()) for n in range(1, 9)]
    assert upper == [2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0, 60.0]
    for n in range(1, 12):
        d = backoff_delay(n, 2.0, 60.0, rand)
        step = min(60.0, 2.0 * 2 ** (n - 1))
        assert step / 2 <= d <= step


class _Max:
    def random(self) -> float:
        return 1.0
