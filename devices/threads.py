"""How many CPU threads a model gets and whether ORT's idle pool threads spin: the one rule.

`choose_threads` is pure over the core count, the machine's load when the model is
loaded and the profile's [session] settings; `select` calls it and `unmask devices`
shows its reasons. What it rests on (benchmarks/bench_threads.py on the 2-core AMD EPYC,
README "Threads and spinning"):

- Spinning pool threads ran 0.2-0.8x of the best setting in every condition measured,
  quiet or loaded: between passes they hold a core the decoder's scoring threads and
  every other process need. Sleeping threads cost 10-30% where spinning once
  won (an idle machine, 2026-12-03). So spinning is off unless a profile or the caller
  asks for it; a load that starts after the model is loaded (a server runs for hours)
  cannot make that choice lose badly.
- Threads that have to wait for a core another process holds lose: with the machine's
  cores shared by other processes, 2 threads ran mostly 0.3-0.8x of 1 on the embedded model. So
  a model gets the physical cores the 1-minute load average leaves free, at least one.
- A small model's ops are too small to split: on the embedded model (hidden size 128)
  2 threads ran 0.6-0.8x of 1 even with the cores to itself, while a 58 M model (hidden
  512) ran 1.1-1.3x. Models under SMALL_HIDDEN get one thread.
"""

from __future__ import annotations

from dataclasses import dataclass

from .profile import DeviceProfile

SMALL_HIDDEN = 256  # between the measured points: hidden 128 lost with 2 threads, hidden 512 won
SPIN_OFF_WHY = "spinning pool threads ran 0.2-0.8x of the best setting, quiet or loaded (bench_threads.py)"


@dataclass(frozen=True)
class ThreadChoice:
    """The CPU threads of one placement: ORT intra-op threads (= the decoder's) and spinning."""

    threads: int
    spinning: bool
    threads_why: str  # one line each for `unmask devices`
    spinning_why: str


def busy_cores(load: float | None, cores: int) -> int:
    """Cores the load average (already scaled to this process's cores) keeps busy, rounded."""
    if load is None:
        return 0
    return min(cores, int(load + 0.5))


def choose_threads(profile: DeviceProfile, cores: int, load: float | None, *, hidden_size: int | None = None,
                   threads: int | None = None, spinning: bool | None = None) -> ThreadChoice:
    """Threads and spinning for a session on `profile`; `threads` / `spinning` are the caller's overrides.

    cores: physical cores this process may use; load: the 1-minute load average scaled to
    them (None where the OS has none, e.g. Windows: taken as idle); hidden_size: the
    model's (None: no model, as `unmask devices` without --model).
    """
    if threads is not None:
        n, n_why = threads, "asked for"
    elif profile.session.intra_op_threads:
        n, n_why = profile.session.intra_op_threads, f"set by profile {profile.name}"
    elif hidden_size is not None and hidden_size < SMALL_HIDDEN and cores > 1:
        n, n_why = 1, (f"hidden size {hidden_size} < {SMALL_HIDDEN}: ops too small to split "
                       "(2 threads ran 0.6-0.8x of 1 on the embedded model)")
    else:
        n, n_why = _free_cores(cores, load)
    if spinning is not None:
        spin, spin_why = spinning, "asked for"
    elif n == 1:
        spin, spin_why = False, "one thread has no pool to spin"
    elif profile.session.allow_spinning:
        spin, spin_why = True, f"profile {profile.name} allows it (fast hand-off; it loses when the cores are shared)"
    else:
        spin, spin_why = False, f"profile {profile.name}: {SPIN_OFF_WHY}"
    return ThreadChoice(n, spin, n_why, spin_why)


def _free_cores(cores: int, load: float | None) -> tuple[int, str]:
    if load is None:
        return cores, "physical cores (no load average on this OS)"
    busy = busy_cores(load, cores)
    if busy == 0:
        return cores, f"physical cores, all idle (load {load:.1f})"
    return max(1, cores - busy), (f"load {load:.1f} keeps {busy} of {cores} physical cores busy; threads "
                                  "waiting for them ran 0.3-0.8x of 1 thread")
