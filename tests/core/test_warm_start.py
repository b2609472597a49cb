"""Warm-started commands: real children forked from a real server, each behaving as ``python -m MODULE``
would: its arguments, its output on the caller's file, its exit code and signals, its own random state."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nerf_lightning.core.warm_start import ChildProcess, WarmProcess, WarmStarter
from tests.helpers.runs import sigint_inherited_as

pytestmark = pytest.mark.slow  # every test starts processes

# The module the children run: reports what a `python -m` run would see, then does what argv asks.
TOOL = '''
import atexit, json, os, random, sys, time
import numpy
import warmtool_heavy
atexit.register(lambda: print("atexit ran", flush=True))
print(json.dumps({"argv": sys.argv[1:], "name": __name__, "file": os.path.basename(sys.argv[0]),
                  "pid": os.getpid(), "random": [random.random(), numpy.random.random()],
                  "heavy_pid": warmtool_heavy.IMPORTED_BY, "env": os.environ.get("WARM_TEST")}), flush=True)
print("to stderr", file=sys.stderr, flush=True)
action = sys.argv[1] if len(sys.argv) > 1 else ""
if action == "sleep":
    time.sleep(float(sys.argv[2]) if len(sys.argv) > 2 else 60)
elif action == "exit":
    sys.exit(int(sys.argv[2]))
elif action == "message":
    sys.exit("a refusal, on stderr")
elif action == "raise":
    raise RuntimeError("boom")
'''
# The "heavy" module the server imports once: it records which process imported it.
HEAVY = "import os\nimport numpy.random\nIMPORTED_BY = os.getpid()\n"


@pytest.fixture
def tool(tmp_path: Path) -> Iterator[dict[str, str]]:
    package = tmp_path / "modules"
    (package / "warmtool").mkdir(parents=True)
    (package / "warmtool" / "__init__.py").write_text("")
    (package / "warmtool" / "__main__.py").write_text(TOOL)
    (package / "warmtool_heavy.py").write_text(HEAVY)
    path = os.pathsep.join(filter(None, [str(package), os.environ.get("PYTHONPATH")]))
    yield {**os.environ, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1", "WARM_TEST": "one"}


def _run(starter: WarmStarter, argv: list[str], log: Path,
         env: dict[str, str]) -> tuple[int, list[str], object]:
    with open(log, "ab") as output:
        output.write(b"header\n")
        output.flush()
        process = starter.start(argv, output, env)
        code = process.wait(timeout=60)
    return code, log.read_text().splitlines(), process


def _report(lines: list[str]) -> dict:
    return json.loads(next(line for line in lines if line.startswith("{")))


def test_children_run_the_module_as_python_dash_m_with_the_preloaded_imports(tool: dict[str, str],
                                                                              tmp_path: Path) -> None:
    with WarmStarter("warmtool", preload=["warmtool_heavy"]) as starter:
        first = _run(starter, ["exit", "0"], tmp_path / "a.log", tool)
        second = _run(starter, ["exit", "3"], tmp_path / "b.log", tool)
    for _, lines, process in (first, second):
        assert isinstance(process, WarmProcess)
        assert lines[0] == "header"  # appended after what the caller wrote, through the same file
        report = _report(lines)
        assert report["name"] == "__main__" and report["file"] == "__main__.py"
        assert report["env"] == "one" and report["pid"] == process.pid != os.getpid()
        assert "to stderr" in lines and lines[-1] == "atexit ran"
    assert (first[0], second[0]) == (0, 3)
    a, b = _report(first[1]), _report(second[1])
    assert a["argv"] == ["exit", "0"] and b["argv"] == ["exit", "3"]
    # Imported once, by the server (neither child), and found already imported by both.
    assert a["heavy_pid"] == b["heavy_pid"] not in (a["pid"], b["pid"], os.getpid())
    # Python's and NumPy's random states differ between children, as between fresh interpreters.
    assert a["random"][0] != b["random"][0] and a["random"][1] != b["random"][1]


def test_exit_codes_and_signals_read_as_popens(tool: dict[str, str], tmp_path: Path) -> None:
    with WarmStarter("warmtool", preload=["warmtool_heavy"]) as starter:
        code, lines, _ = _run(starter, ["message"], tmp_path / "m.log", tool)
        assert code == 1 and "a refusal, on stderr" in lines
        code, lines, _ = _run(starter, ["raise"], tmp_path / "r.log", tool)
        assert code == 1 and "RuntimeError: boom" in lines
        for stop, sig in (("terminate", signal.SIGTERM), ("kill", signal.SIGKILL)):
            with open(tmp_path / f"{stop}.log", "ab") as output:
                process = starter.start(["sleep"], output, tool)
                assert isinstance(process, WarmProcess)
                with pytest.raises(subprocess.TimeoutExpired):
                    process.wait(timeout=0.5)
                assert process.poll() is None
                getattr(process, stop)()
                assert process.wait(timeout=30) == -sig
        # Ctrl-C reaches the child as SIGINT: a KeyboardInterrupt it does not catch ends it by that signal.
        with sigint_inherited_as(signal.default_int_handler):  # a caller in a terminal's foreground
            code, process = _interrupted(starter, ["sleep"], tmp_path / "int.log", tool)
            assert isinstance(process, WarmProcess) and code == -signal.SIGINT


def _interrupted(starter: WarmStarter, argv: list[str], log: Path,
                 env: dict[str, str]) -> tuple[int, ChildProcess]:
    """The exit code of ``argv`` sent SIGINT once it has started (printed its report), and its process."""
    with open(log, "ab") as output:
        process = starter.start(argv, output, env)
        deadline = time.monotonic() + 30
        while "to stderr" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        process.send_signal(signal.SIGINT)
        return process.wait(timeout=30), process


def test_a_caller_that_ignores_ctrl_c_starts_children_that_ignore_it_warm_or_cold(
        tool: dict[str, str], tmp_path: Path) -> None:
    """As a shell's background job: the caller ignores SIGINT, so a fresh interpreter it starts does too,
    and a warm child the same. Both sleep through a Ctrl-C and end by themselves."""
    with sigint_inherited_as(signal.SIG_IGN), WarmStarter("warmtool", preload=["warmtool_heavy"]) as starter:
        code, warm = _interrupted(starter, ["sleep", "1"], tmp_path / "warm.log", tool)
        assert isinstance(warm, WarmProcess) and code == 0
        cold_env = {**tool, "WARM_TEST": "cold"}  # another environment: started as a fresh interpreter
        code, cold = _interrupted(starter, ["sleep", "1"], tmp_path / "cold.log", cold_env)
        assert isinstance(cold, subprocess.Popen) and code == 0


def test_another_environment_or_a_lost_server_starts_cold(tool: dict[str, str], tmp_path: Path) -> None:
    with WarmStarter("warmtool", preload=["warmtool_heavy"]) as starter:
        code, lines, process = _run(starter, ["exit", "0"], tmp_path / "warm.log", tool)
        assert isinstance(process, WarmProcess) and code == 0
        # OpenMP and others read some variables once, at import: a child of the server would not see it.
        other = {**tool, "WARM_TEST": "two"}
        code, lines, process = _run(starter, ["exit", "0"], tmp_path / "env.log", other)
        assert isinstance(process, subprocess.Popen) and code == 0
        report = _report(lines)
        assert report["env"] == "two" and report["heavy_pid"] == report["pid"]  # imported by itself
        assert starter._server is not None
        starter._server.kill()
        starter._server.wait()
        code, lines, process = _run(starter, ["exit", "5"], tmp_path / "lost.log", tool)
        assert isinstance(process, subprocess.Popen) and code == 5 and _report(lines)["argv"] == ["exit", "5"]


def test_a_killed_caller_takes_the_server_and_its_child_along_as_a_process_group(tool: dict[str, str],
                                                                                tmp_path: Path) -> None:
    """What a sweep worker killed with its process group leaves: nothing running."""
    caller = tmp_path / "caller.py"
    caller.write_text(
        "import os, sys, time\n"
        "from nerf_lightning.core.warm_start import WarmStarter\n"
        "starter = WarmStarter('warmtool', preload=['warmtool_heavy'])\n"
        "with open(sys.argv[1], 'ab') as out:\n"
        "    child = starter.start(['sleep'], out, dict(os.environ))\n"
        "    print(child.pid, starter._server.pid, flush=True)\n"
        "    child.wait()\n")
    process = subprocess.Popen([sys.executable, str(caller), str(tmp_path / "child.log")], env=tool,
                               stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert process.stdout is not None
    child, server = (int(pid) for pid in process.stdout.readline().split())
    os.killpg(process.pid, signal.SIGKILL)
    assert process.wait(timeout=30) == -signal.SIGKILL
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(_alive(pid) for pid in (child, server)):
        time.sleep(0.05)
    assert not _alive(child) and not _alive(server)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ", 1)[1][0] != "Z"  # a zombie waits only for its reaper
    except FileNotFoundError:
        return False


def test_end_process_waits_for_threads_runs_atexit_and_flushes_before_it_exits(tmp_path: Path) -> None:
    """How the script and every warm child end: nothing they were still writing is lost."""
    script = (
        "import atexit, sys, threading, time\n"
        "from pathlib import Path\n"
        "from nerf_lightning.core.warm_start import end_process\n"
        "out = Path(sys.argv[1])\n"
        "atexit.register(lambda: (out / 'atexit').write_text('ran'))\n"
        "threading.Thread(target=lambda: (time.sleep(0.5), (out / 'thread').write_text('done'))).start()\n"
        "print('buffered, never flushed by hand', end='')\n"
        "end_process(7)\n")
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 7, done.stderr
    assert done.stdout == "buffered, never flushed by hand"
    assert (tmp_path / "atexit").read_text() == "ran" and (tmp_path / "thread").read_text() == "done"
