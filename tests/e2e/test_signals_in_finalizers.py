"""A stop signal is not lost when its handler runs inside a finalizer. Python reports an exception raised there as
"Exception ignored" and carries on, so a SIGTERM that landed in a weakref callback (CI saw it in Prefect's engine)
let `solrl train` finish and exit 0; flows/signals.py sends such a signal again once the finalizer has returned."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import pytest

from repo_paths import ROOT

# The signal is sent from a weakref callback and handled inside it (the loop gives the interpreter the chance), as
# when a SIGTERM from outside lands while the garbage collector runs a finalizer.
SCRIPT = textwrap.dedent("""
    import os, signal, sys, time, weakref
    from solrl.flows.signals import interrupted_exit_code, stop_on_signals

    class Thing: pass

    def signal_inside_a_finalizer():
        thing = Thing()
        def callback(_ref):
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(10_000): pass
        ref = weakref.ref(thing, callback)
        del thing

    def work():
        signal_inside_a_finalizer()
        for _ in range(300): time.sleep(0.01)   # 3 s of work the signal must stop
        print("finished the work")

    stop_on_signals()
    try:
        if sys.argv[1] == "inside-a-flow":   # Prefect's SIGTERM handler, as installed while a flow runs
            from prefect.utilities.engine import capture_sigterm
            with capture_sigterm():
                work()
        else:
            work()
        sys.exit(0)
    except KeyboardInterrupt:
        sys.exit(interrupted_exit_code())
""")


def _sigint(disposition):
    return lambda: signal.signal(signal.SIGINT, disposition)


@pytest.mark.e2e  # a subprocess of a few seconds
@pytest.mark.parametrize("where", ["outside-a-flow", "inside-a-flow"])
# SIGINT ignored: a command started in the background by a shell script (`solrl train ... &`) still stops on SIGTERM
@pytest.mark.parametrize("sigint", [signal.SIG_DFL, signal.SIG_IGN], ids=["sigint-default", "sigint-ignored"])
def test_sigterm_handled_inside_a_finalizer_still_stops_the_command(tmp_path, where, sigint):
    script = tmp_path / "stop_in_finalizer.py"
    script.write_text(SCRIPT)
    done = subprocess.run([sys.executable, str(script), where], cwd=ROOT, env={"PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=120, preexec_fn=_sigint(sigint))
    assert done.returncode == 143, done.stderr[-2000:]  # 128 + SIGTERM, as after a SIGTERM anywhere else
    assert "finished the work" not in done.stdout
    assert "Exception ignored" not in done.stderr, done.stderr[-2000:]  # no traceback for a stop
