"""A one-node Slurm cluster on this machine: Debian's `slurm-wlm` and `munge`, run as plain daemons.

No systemd (a container has none) and no accounting database: munged, slurmctld and slurmd are
started directly, each with its files in one state folder (the munge key and socket, slurm.conf,
the spool and the logs), on the machine's hostname and CPUs (`nproc`). Array tasks take one CPU
each (select/cons_tres with CR_CPU), so several run at once; a job that is requeued runs again.

    python -m tests.slurm.cluster start   # `make slurm`: prints the SLURM_CONF to export
    python -m tests.slurm.cluster stop    # `make slurm-stop`

The tests' session fixture (`tests/slurm/test_array.py`) starts it the same way and stops it at the end,
or uses the one `make slurm` left running in the same state folder (PREFLAB_SLURM_STATE moves it).
"""

from __future__ import annotations

import getpass
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

STATE = Path(os.environ.get("PREFLAB_SLURM_STATE", Path.home() / ".cache" / "preflab" / "slurm"))
DAEMONS = ("munged", "slurmctld", "slurmd")
# MinJobAge keeps a finished job in slurmctld's memory for an hour: with no accounting database, `scontrol show
# job` is where a task's final state and exit code are read. A requeued job may start again cred_expire + 1
# seconds later (Slurm's default, 120, would hold every requeue for two minutes).
CONF = """\
ClusterName=preflab
SlurmctldHost={host}
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser={user}
SlurmdUser={user}
MailProg=/bin/true
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={state}/munge.socket,cred_expire=5
StateSaveLocation={state}/ctld
SlurmdSpoolDir={state}/spool
SlurmctldPidFile={state}/slurmctld.pid
SlurmdPidFile={state}/slurmd.pid
SlurmctldLogFile={state}/slurmctld.log
SlurmdLogFile={state}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1
MpiDefault=none
ReturnToService=2
JobRequeue=1
MinJobAge=3600
InactiveLimit=0
KillWait=5
SlurmctldTimeout=30
SlurmdTimeout=30
NodeName={host} CPUs={cpus} State=UNKNOWN
PartitionName=main Nodes={host} Default=YES MaxTime=INFINITE State=UP
"""


def conf_path(state: Path = STATE) -> Path:
    return state / "slurm.conf"


def environment(state: Path = STATE) -> dict[str, str]:
    """What a Slurm command needs to reach this cluster: its slurm.conf."""
    return {**os.environ, "SLURM_CONF": str(conf_path(state))}


def running(state: Path = STATE) -> bool:
    """Whether this cluster's slurmctld runs, answers and its node takes jobs."""
    # A client finding no controller tries for 10 s: ask only a slurmctld that runs.
    if not _alive(_pid(state, "slurmctld"), "slurmctld") or shutil.which("sinfo") is None:
        return False
    found = subprocess.run(
        ["sinfo", "--noheader", "--format=%t"], env=environment(state), capture_output=True, text=True, timeout=30
    )
    return found.returncode == 0 and found.stdout.strip() in ("idle", "mix", "alloc")


def write_conf(state: Path = STATE) -> Path:
    """slurm.conf for this host and its CPUs, with every file in `state`."""
    (state / "ctld").mkdir(parents=True, exist_ok=True)
    (state / "spool").mkdir(exist_ok=True)
    path = conf_path(state)
    path.write_text(
        CONF.format(
            host=socket.gethostname(),
            cpus=len(os.sched_getaffinity(0)),  # what `nproc` says
            user=getpass.getuser(),
            state=state,
            ctld_port=os.environ.get("PREFLAB_SLURMCTLD_PORT", "6817"),
            slurmd_port=os.environ.get("PREFLAB_SLURMD_PORT", "6818"),
        ),
        encoding="utf-8",
    )
    return path


def start(state: Path = STATE, timeout: float = 60) -> bool:
    """Start munged, slurmctld and slurmd on `state` unless they answer already. Returns whether it started them."""
    if running(state):
        return False
    missing = [name for name in (*DAEMONS, "sbatch") if shutil.which(name) is None]
    if missing:
        raise RuntimeError(f"Slurm is not installed ({', '.join(missing)} missing): run `make slurm-install` (as root)")
    stop(state)  # what a killed run may have left
    state.mkdir(parents=True, exist_ok=True)
    for name in DAEMONS:  # the logs of this start only
        (state / f"{name}.log").unlink(missing_ok=True)
    state.chmod(0o755)  # munged wants its socket's folder searchable by all
    key = state / "munge.key"
    if not key.exists():
        key.write_bytes(secrets.token_bytes(128))
        key.chmod(0o400)
    conf = write_conf(state)
    munge = state / "munge.socket"
    subprocess.run(
        [
            *("munged", "--force", f"--socket={munge}", f"--key-file={key}", f"--pid-file={state}/munged.pid"),
            *(f"--log-file={state}/munged.log", f"--seed-file={state}/munged.seed"),
        ],
        check=True,
    )
    # -c: a fresh start, without the jobs a previous cluster in this folder left in its state files.
    subprocess.run(["slurmctld", "-c", "-f", str(conf)], check=True)
    subprocess.run(["slurmd", "-f", str(conf)], check=True)
    deadline = time.monotonic() + timeout
    while not running(state):
        if time.monotonic() > deadline:
            logs = "\n".join(_tail(state / f"{name}.log") for name in ("slurmctld", "slurmd"))
            stop(state)
            raise RuntimeError(f"the Slurm cluster in {state} did not come up:\n{logs}")
        time.sleep(0.2)
    return True


def stop(state: Path = STATE, timeout: float = 30) -> None:
    """Stop the daemons whose pid files are in `state` (slurmd, slurmctld, then munged), and wait for them."""
    for name in reversed(DAEMONS):
        pid = _pid(state, name)
        if _alive(pid, name):  # a stale file may name a process that took the pid since: only the daemon is stopped
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while _alive(pid, name) and time.monotonic() < deadline:
            time.sleep(0.05)
        (state / f"{name}.pid").unlink(missing_ok=True)


def _pid(state: Path, name: str) -> int:
    """The pid daemon `name` wrote in `state`; 0 without one."""
    try:
        return int((state / f"{name}.pid").read_text().strip())
    except (FileNotFoundError, ValueError):
        return 0


def _alive(pid: int, name: str) -> bool:
    """Whether process `pid` runs and is the daemon `name`."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    command, state = stat.split(" (", 1)[1].rsplit(") ", 1)
    return command == name and not state.startswith("Z")


def _tail(path: Path, n: int = 20) -> str:
    try:
        return f"{path.name}:\n" + "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return f"{path.name}: (no log)"


def main() -> None:
    what = sys.argv[1] if len(sys.argv) > 1 else "start"
    if what == "start":
        start()
        print(f"Slurm is up: export SLURM_CONF={conf_path()}")
    elif what == "stop":
        stop()
    else:
        raise SystemExit("usage: python -m tests.slurm start|stop")


if __name__ == "__main__":
    main()
