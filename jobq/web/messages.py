"""What a page says after an action. The redirect carries a code from here,
never text from the request, and, where the action touched several jobs,
how many it changed of how many; a success shows as one, anything the user
asked for that did not happen as an error."""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from jobq.web.rendering import NO_BANNER, Banner

#: The successes of one job's action, by code.
MESSAGES = {
    "retried": "The job is pending again.",
    "deleted": "The dead job was deleted.",
    "cancelled": "The pending job was cancelled.",
    "cancelled-delayed": "The delayed job was cancelled.",
    "cancelled-retrying": "The retrying job was cancelled: it is not tried again.",
    "cancelled-waiting": "The waiting job was cancelled (and its children "
    "waiting on it, as their after_failure says).",
    "stopping": "The running job was asked to stop: it ends cancelled when its "
    "handler stops (or is abandoned after its grace).",
    "stopped": "The running job was asked to stop, and has stopped.",
    "schedule-paused": "The schedule was paused: every process passes its slots "
    "over until it is resumed.",
    "schedule-resumed": "The schedule was resumed: its next slot runs; the slots "
    "passed over while it was paused do not.",
    "schedule-run": "One job of the schedule was enqueued now (its last job below); "
    "its next slot still runs as planned.",
}
#: The failures of one job's action, by code.
FAILURES = {
    "unchanged": "Nothing changed: the job is no longer in that state.",
    "schedule-unchanged": "Nothing changed: the schedule was paused, or running, "
    "already.",
    "no-such-schedule": "No such schedule: no code here declares it and the store "
    "does not keep it.",
    "schedule-not-here": "Not run: no code loaded by this dashboard declares that "
    "schedule, so its job cannot be built here. Run it from the application's "
    "own dashboard, or with jobq run-schedule --app.",
    "schedule-busy": "Not run: the schedule's last job is still pending or "
    "running, and the schedule skips overlapping runs (overlap='skip').",
}


class Counted(NamedTuple):
    """An action on several jobs: what it did, to which jobs, and why those
    it did not change were left (``2 were no longer dead``)."""

    verb: str
    jobs: str
    others: str


_NOT_RETRIED = "no longer dead, or had a key another job holds"
#: The actions on several jobs, by code.
COUNTED = {
    "bulk-retried": Counted("Retried", "dead jobs matching the filter", _NOT_RETRIED),
    "bulk-deleted": Counted(
        "Deleted", "dead jobs matching the filter", "no longer dead"
    ),
    "selected-retried": Counted("Retried", "selected dead jobs", _NOT_RETRIED),
    "selected-deleted": Counted("Deleted", "selected dead jobs", "no longer dead"),
    "selected-cancelled": Counted(
        "Cancelled", "selected pending jobs", "no longer pending"
    ),
}
#: The most digits of a count a banner shows (a count comes back in the
#: request, so it is read with care).
COUNT_DIGITS = 9


def counted(code: str, done: int, of: int) -> dict[str, str]:
    """The query that makes the next page say ``code``'s counts."""
    return {"msg": code, "done": str(done), "of": str(of)}


def banner(query: Mapping[str, str]) -> Banner:
    """What a redirect's ``msg`` code (and counts) say: a success, a
    failure, or nothing for a code or count that is not one of ours."""
    code = query.get("msg", "")
    found = COUNTED.get(code)
    if found is not None:
        return _counted(found, query.get("done", ""), query.get("of", ""))
    return Banner(MESSAGES.get(code), FAILURES.get(code))


def _counted(action: Counted, done_text: str, of_text: str) -> Banner:
    done, of = _count(done_text), _count(of_text)
    if done is None or of is None or done > of:
        return NO_BANNER
    said = f"{action.verb} {done} of {of} {action.jobs}"
    if done == of:
        return Banner(message=f"{said}.")
    missed = of - done
    was = "was" if missed == 1 else "were"
    return Banner(error=f"{said}: {missed} {was} {action.others}.")


def _count(text: str) -> int | None:
    if not (text.isascii() and text.isdigit() and len(text) <= COUNT_DIGITS):
        return None
    return int(text)
