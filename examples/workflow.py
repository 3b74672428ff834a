"""A workflow: resize photos in parallel, then build the gallery from their
results; a broken step dies, is fixed and revived, and the gallery follows.

    python examples/workflow.py [DIRECTORY]

The jobs live in DIRECTORY/jobs.db (SQLite; a temporary directory, removed
at the end, when none is given). The "photos" are names, so this runs
offline and finishes in about a second.
"""

from __future__ import annotations

import sys
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path

import jobq

broken = {"cat.raw"}  # photos the resizer cannot read yet
_print_lock = threading.Lock()


def say(message: str = "") -> None:
    """Print one whole line, even with several worker threads printing."""
    with _print_lock:
        print(message, flush=True)


def resize(photo: str) -> str:
    """One step of the fan-out: its return value goes to the gallery."""
    if photo in broken:
        say(f"  resize {photo}: unreadable")
        raise ValueError(f"cannot decode {photo}")
    say(f"  resize {photo}: done")
    return f"thumbs/{photo.rsplit('.', 1)[0]}.jpg"


def gallery(title: str, parent_results: Sequence[str] = ()) -> str:
    """The fan-in: runs once every resize completed, with their results."""
    say(f"  gallery {title!r}: {', '.join(parent_results)}")
    return f"{title}: {len(parent_results)} photos"


def main(directory: Path) -> None:
    # keep_completed: the gallery's result stays readable once it completed
    queue = jobq.JobQueue(
        store=directory / "jobs.db", max_attempts=2, base_delay=0.01,
        keep_completed=60,
    )  # fmt: skip
    resizing = queue.task(name="resize")(resize)
    building = queue.task(name="gallery")(gallery)
    queue.start(workers=4)
    photos = ["beach.png", "cat.raw", "dog.png"]
    say(f"Resizing {len(photos)} photos, then the gallery ({directory / 'jobs.db'})")
    steps = [resizing.enqueue(photo) for photo in photos]
    album = building.using(after=steps).enqueue("Holidays")

    queue.join(timeout=30)  # nothing runnable is left: cat.raw died
    dead = queue.dead_jobs()
    waiting = queue.get(album)
    say(f"\nDead: {[(job.payload['args'][0], job.last_error) for job in dead]}")
    say(f"The gallery waits on job(s) {waiting.waiting_on if waiting else None}")

    say("\nFixing the decoder and reviving the dead step:")
    broken.clear()
    for job in dead:
        queue.retry_dead(job.id)
    record = queue.wait(album, timeout=30)
    if record is None or record.state is not jobq.JobState.COMPLETED:
        sys.exit(f"the gallery did not complete: {record}")
    say(f"\nGallery: {record.result!r}")
    queue.close()


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(Path(sys.argv[1]))
    else:
        with tempfile.TemporaryDirectory() as scratch:
            main(Path(scratch))
