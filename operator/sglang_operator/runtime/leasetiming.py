"""The leader election's durations, apart from the election itself so that the command line can show their
defaults without importing the Kubernetes client."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Timing:
    """The election's durations: client-go's three, with the renewal's period apart from the retry after a failure.

    A standby takes over at most `lease_seconds` (+ its quarter-second look at the watched Lease, + one request)
    after the holder's last renewal, so within 15 s of the holder's death. The holder renews every
    `renew_interval_seconds` and, after a failed attempt, every `retry_seconds`, until `renew_deadline_seconds`
    after its last successful renewal: the API server may stall for `renew_deadline_seconds -
    renew_interval_seconds` (4 s) at the worst moment before the holder must stop. The renewal's period is the
    operator pair's main fixed cost when nothing changes (8.6 requests a minute at 7 s, where client-go's 2 s costs 30:
    docs/scale.md)."""

    lease_seconds: int = 13
    renew_deadline_seconds: float = 11.0
    renew_interval_seconds: float = 7.0
    retry_seconds: float = 1.0

    def __post_init__(self) -> None:
        if not (
            0 < self.retry_seconds <= self.renew_interval_seconds < self.renew_deadline_seconds < self.lease_seconds
        ):
            raise ValueError(
                "need 0 < retry <= renew interval < renew deadline < lease duration, got "
                f"retry {self.retry_seconds:g} s, renew interval {self.renew_interval_seconds:g} s, "
                f"renew deadline {self.renew_deadline_seconds:g} s, lease {self.lease_seconds} s"
            )
