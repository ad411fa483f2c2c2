"""Per-thread CPU profiles of the bot, for ``bench/mention_latency.py --profile DIR`` (not part of myao2).

Put on the bot's PYTHONPATH with ``MYAO2_BENCH_PROFILE=DIR`` set, it gives every thread a cProfile timed by that
thread's CPU clock (`time.thread_time`). SIGUSR1 clears what they counted; SIGUSR2 writes each thread's counts to
``DIR/<thread name>-<ident>.pstats`` (marshalled `pstats` data) and then ``DIR/DONE``.

cProfile adds a few microseconds of CPU to every call it counts: code made of many small calls shows several times
its real cost, a C function that does much in one call (a socket send, a JSON encoding, an SQLite statement) about
its own. Read the figures as shares, not as milliseconds.
"""

import os

_DIRECTORY = os.environ.get("MYAO2_BENCH_PROFILE")
if _DIRECTORY:
    import cProfile
    import marshal
    import signal
    import sys
    import threading
    import time

    _profiles: dict[str, cProfile.Profile] = {}
    _lock = threading.Lock()

    def _profile(name: str) -> None:
        profile = cProfile.Profile(time.thread_time)
        with _lock:
            _profiles[name] = profile
        profile.enable()

    def _first_call(frame: object, event: str, arg: object) -> None:
        """`threading.setprofile`'s hook, called once in each new thread: hands the thread its own cProfile."""
        sys.setprofile(None)
        thread = threading.current_thread()
        _profile(f"{thread.name}-{thread.ident}")

    def _clear(*_: object) -> None:
        with _lock:
            for profile in _profiles.values():
                profile.clear()

    def _write(*_: object) -> None:
        with _lock:
            profiles = list(_profiles.items())
        for name, profile in profiles:
            profile.snapshot_stats()
            with open(os.path.join(_DIRECTORY, f"{name.replace('/', '_')}.pstats"), "wb") as out:
                marshal.dump(profile.stats, out)
        open(os.path.join(_DIRECTORY, "DONE"), "w").close()

    threading.setprofile(_first_call)
    _profile("MainThread")
    signal.signal(signal.SIGUSR1, _clear)
    signal.signal(signal.SIGUSR2, _write)
