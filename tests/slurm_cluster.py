"""A throw-away single-node SLURM cluster for tests: the session fixture ``slurm_cluster``.

Why a real cluster: the ``slurm`` profile and Snakemake's slurm executor talk to ``sbatch``,
``squeue`` and ``scancel``; a mock would not catch a wrong option name, a rejected resource
request or a status query that never returns. Debian's ``slurm-wlm`` + ``munge`` run a complete
controller + compute node on this host in a few seconds (``.ci/install_slurm.sh`` installs them).

Use it from a test module with either of::

    pytest_plugins = ["slurm_cluster"]          # also registers the ``slurm`` marker
    from slurm_cluster import slurm_cluster     # noqa: F401  (plain fixture import)

The fixture yields a :class:`SlurmCluster`; pass ``cluster.env`` to every SLURM client and to
Snakemake (``SLURM_CONF``, and client wrappers first on ``PATH`` that keep pointing at this
cluster inside jobs; see ``_write_client_wrappers``). Everything lives under one temporary directory with its own
munge socket, key, pid files and non-default ports, so a second cluster (another pytest process,
a system SLURM) is never touched, and teardown signals only the PIDs this fixture started.

Without the binaries or without root the fixture skips; with ``CI=true`` it fails instead,
because CI installs the packages and a skip there would hide a broken SLURM path.
"""

from __future__ import annotations

import ctypes
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

__all__ = ["SlurmCluster", "slurm_cluster", "start_cluster", "terminate_with_parent"]

PARTITION = "debug"
FAKE_GPUS = 2  # fake `gpu` GRES offered on the node when SLURM accepts it
GPU_TYPE = "fakegpu"  # their model name, so `gpu_model` requests can be tested too
START_TIMEOUT_S = 60.0
DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "squeue", "sinfo", "scontrol", "scancel", "srun")
_BAD_NODE_STATES = ("inval", "drain")  # sinfo %T of a node whose registration SLURM rejected (e.g. GRES)
# Client/daemon variables inherited from a surrounding SLURM job or a user's shell would
# point the clients at another cluster or add options to every sbatch/srun call.
_FOREIGN_ENV_PREFIXES = ("SLURM_", "SBATCH_", "SRUN_", "SALLOC_", "SQUEUE_", "SINFO_", "SCONTROL_")


def _in_ci() -> bool:
    """CI installs slurm-wlm, so a missing piece there is a failure, not a reason to skip."""
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


def _unavailable(reason: str) -> None:
    """Skip locally, fail in CI (never returns)."""
    if _in_ci():
        pytest.fail(f"SLURM test cluster unavailable in CI: {reason}", pytrace=False)
    pytest.skip(f"SLURM test cluster unavailable: {reason}")


def _which(name: str) -> str | None:
    """Find a binary, also in sbin directories that are often missing from a non-login PATH."""
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin:/usr/local/sbin")


def missing_requirements() -> list[str]:
    """Why this host cannot run the cluster (empty list: it can)."""
    problems = [f"`{name}` not found" for name in DAEMONS + CLIENTS if _which(name) is None]
    if problems:
        problems.append("install with `.ci/install_slurm.sh` (Debian: slurm-wlm munge)")
    if hasattr(os, "geteuid") and os.geteuid() != 0:
        problems.append("slurmd must run as root (SlurmUser=root)")
    return problems


def _free_port() -> int:
    """A TCP port nobody listens on now, so two clusters on one host never share a port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _real_memory_mb() -> int:
    """RealMemory a bit below the memory available now, so SLURM never promises more than exists."""
    meminfo = Path("/proc/meminfo").read_text()
    for line in meminfo.splitlines():
        if line.startswith("MemAvailable:"):
            available_mb = int(line.split()[1]) // 1024
            return max(256, int(available_mb * 0.8))
    return 1024


def _short_hostname() -> str:
    """SLURM matches NodeName and SlurmctldHost against the short host name (`hostname -s`)."""
    out = subprocess.run(["hostname", "-s"], capture_output=True, text=True, check=False).stdout.strip()
    return out or socket.gethostname().split(".")[0]


def terminate_with_parent() -> None:
    """Pre-exec hook for children of the test process: SIGTERM them if it dies (even by SIGKILL).

    Pass as `preexec_fn=` to a long-running child (a Snakemake run) so a killed pytest leaves
    nothing behind; Linux only (a no-op elsewhere).
    """
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG
    except OSError:
        pass


def _daemon_preexec() -> None:
    """Daemons get their own session (a terminal Ctrl-C reaches pytest, which tears down) and die with pytest."""
    os.setsid()
    terminate_with_parent()


def render_slurm_conf(
    *,
    root: Path,
    host: str,
    cpus: int,
    real_memory_mb: int,
    ctld_port: int,
    slurmd_port: int,
    munge_socket: Path,
    gpus: int,
) -> str:
    """slurm.conf for one controller + one node on this host, no accounting, no cgroups.

    linuxproc/task-none need no cgroup hierarchy (unavailable in most containers);
    `config_overrides` makes slurmd trust these numbers instead of draining the node when the
    hardware differs; MinJobAge 300 s keeps finished jobs visible to `squeue`, which the
    Snakemake executor uses for status when there is no accounting database.
    """
    gres_lines = ["GresTypes=gpu"] if gpus else []
    node_gres = f" Gres=gpu:{GPU_TYPE}:{gpus}" if gpus else ""
    lines = [
        "# Written by tests/slurm_cluster.py for a throw-away single-node test cluster.",
        "ClusterName=dgnotest",
        f"SlurmctldHost={host}(127.0.0.1)",
        f"SlurmctldPort={ctld_port}",
        f"SlurmdPort={slurmd_port}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        f"AuthInfo=socket={munge_socket}",
        "MpiDefault=none",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "JobCompType=jobcomp/none",
        "SchedulerType=sched/backfill",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core_Memory",
        "DefMemPerCPU=256",
        "SlurmdParameters=config_overrides",
        "ReturnToService=2",
        "MinJobAge=300",
        "KillWait=5",
        "InactiveLimit=0",
        f"StateSaveLocation={root / 'state'}",
        f"SlurmdSpoolDir={root / 'spool'}",
        f"SlurmctldPidFile={root / 'run' / 'slurmctld.pid'}",
        f"SlurmdPidFile={root / 'run' / 'slurmd.pid'}",
        f"SlurmctldLogFile={root / 'log' / 'slurmctld.log'}",
        f"SlurmdLogFile={root / 'log' / 'slurmd.log'}",
        "SlurmctldDebug=info",
        "SlurmdDebug=info",
        *gres_lines,
        f"NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={real_memory_mb}{node_gres} State=UNKNOWN",
        f"PartitionName={PARTITION} Nodes={host} Default=YES MaxTime=INFINITE State=UP",
    ]
    return "\n".join(lines) + "\n"


@dataclass(kw_only=True)
class SlurmCluster:
    """A running test cluster: where its files are and how to talk to it."""

    root: Path  # everything: bin/, conf/, state/, spool/, log/, run/, fakedev/
    conf_dir: Path  # slurm.conf, gres.conf, munge.key
    env: dict[str, str]  # os.environ + SLURM_CONF + client wrappers first on PATH, no foreign SLURM_*
    host: str
    cpus: int
    real_memory_mb: int
    gpus: int  # fake GPUs (`gpu` GRES) on the node; 0 when SLURM refused them
    gpu_type: str = GPU_TYPE  # their model, for `--gpus=<type>:n` / Snakemake's `gpu_model`
    partition: str = PARTITION
    startup_s: float = 0.0
    _procs: dict[str, subprocess.Popen] = field(default_factory=dict, repr=False)

    @property
    def slurm_conf(self) -> Path:
        return self.conf_dir / "slurm.conf"

    def run(self, *args: str, check: bool = True, timeout: float = 30.0) -> subprocess.CompletedProcess:
        """Run a SLURM client (`sbatch`, `squeue`, ...) against this cluster; text output."""
        return subprocess.run(
            [shutil.which(args[0], path=self.env["PATH"]) or args[0], *args[1:]],
            env=self.env,
            capture_output=True,
            text=True,
            check=check,
            timeout=timeout,
        )

    # `subprocess.run(..., preexec_fn=cluster.terminate_with_parent)` for Snakemake runs in tests
    terminate_with_parent = staticmethod(terminate_with_parent)

    def job_state(self, job_id: str) -> str:
        """State of one job from squeue (kept there for MinJobAge after it ends); '' if unknown."""
        out = self.run("squeue", "-h", "--states=all", "-j", job_id, "-o", "%T", check=False).stdout
        return out.strip().splitlines()[0] if out.strip() else ""

    def wait_job(self, job_id: str, *, timeout: float = 60.0) -> str:
        """Poll squeue until the job reaches a final state; return that state."""
        final = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"}
        deadline = time.monotonic() + timeout
        state = ""
        while time.monotonic() < deadline:
            state = self.job_state(job_id)
            if state in final:
                return state
            time.sleep(0.5)
        raise TimeoutError(f"job {job_id} still {state or 'unknown'} after {timeout:.0f} s\n{self.diagnostics()}")

    def diagnostics(self, lines: int = 40) -> str:
        """Tails of every daemon log plus sinfo/squeue, for assertion messages."""
        parts = []
        for log in sorted((self.root / "log").glob("*")):
            text = log.read_text(errors="replace").splitlines()[-lines:]
            parts.append(f"--- {log.name} (last {len(text)} lines)\n" + "\n".join(text))
        for name, proc in self._procs.items():
            status = "running" if proc.poll() is None else f"exited {proc.returncode}"
            parts.append(f"--- {name} pid {proc.pid}: {status}")
        for cmd in (("sinfo", "-N", "-l"), ("squeue", "--states=all")):
            try:
                res = self.run(*cmd, check=False, timeout=10)
                parts.append(f"--- {' '.join(cmd)}\n{res.stdout}{res.stderr}")
            except (OSError, subprocess.TimeoutExpired) as exc:
                parts.append(f"--- {' '.join(cmd)} failed: {exc}")
        return "\n".join(parts)

    def _spawn(self, name: str, argv: list[str]) -> None:
        """Start one daemon in the foreground (its Popen PID is the daemon's PID)."""
        out = open(self.root / "log" / f"{name}.stdout", "ab")  # noqa: SIM115 - lives as long as the daemon
        self._procs[name] = subprocess.Popen(
            argv,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=_daemon_preexec,
        )
        out.close()  # the child holds its own descriptor

    def _node_state(self) -> str:
        res = self.run("sinfo", "-h", "-N", "-n", self.host, "-o", "%T", check=False, timeout=10)
        return res.stdout.strip().lower() if res.returncode == 0 else ""

    def _wait(self, what: str, ready, timeout: float) -> None:
        """Poll `ready()` until true; raise with the logs when a daemon died or time ran out."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if ready():
                return
            dead = [n for n, p in self._procs.items() if p.poll() is not None]
            if dead:
                raise RuntimeError(f"{', '.join(dead)} exited while waiting for {what}\n{self.diagnostics()}")
            time.sleep(0.25)
        raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}\n{self.diagnostics()}")

    def cancel_all_jobs(self, timeout: float = 20.0) -> None:
        """scancel every job of this cluster and wait until none runs (their slurmstepd exit too)."""
        res = self.run("squeue", "-h", "-o", "%i", check=False, timeout=10)
        ids = res.stdout.split() if res.returncode == 0 else []
        if not ids:
            return
        self.run("scancel", *ids, check=False, timeout=10)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            res = self.run("squeue", "-h", "-o", "%i", "--states=PENDING,RUNNING,COMPLETING,CONFIGURING", check=False)
            if res.returncode != 0 or not res.stdout.split():
                return
            time.sleep(0.5)

    def stop(self, *, keep_munged: bool = False) -> None:
        """Cancel jobs, then SIGTERM (SIGKILL after 10 s) exactly the daemons this object started."""
        if self._procs.get("slurmctld") and self._procs["slurmctld"].poll() is None:
            try:
                self.cancel_all_jobs()
            except (OSError, subprocess.TimeoutExpired):
                pass
        names = ("slurmd", "slurmctld") if keep_munged else ("slurmd", "slurmctld", "munged")
        for name in names:  # reverse start order: munged authenticates the others
            proc = self._procs.pop(name, None)
            if proc is None or proc.poll() is not None:
                continue
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


def _write_client_wrappers(bin_dir: Path, slurm_conf: Path) -> Path:
    """Client wrappers that pin SLURM_CONF, for processes that strip SLURM_* from their environment.

    Snakemake's slurm-jobstep executor runs each rule as `srun ...` after deleting every SLURM_*
    variable except the job ids, SLURM_CONF included. A real cluster's srun then finds
    /etc/slurm/slurm.conf; this cluster has none, so `PATH` (exported into jobs by sbatch) leads
    to these wrappers instead.
    """
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name in CLIENTS:
        wrapper = bin_dir / name
        wrapper.write_text(f'#!/bin/sh\nSLURM_CONF="{slurm_conf}" exec "{_which(name)}" "$@"\n')
        wrapper.chmod(0o755)
    return bin_dir


def _start_munged(cluster: SlurmCluster, munge_socket: Path) -> None:
    """munged with this cluster's own key and socket (slurm.conf points AuthInfo at it)."""
    root = cluster.root
    cluster._spawn(
        "munged",
        [
            _which("munged"),
            "--foreground",
            "--force",  # tolerate a leftover socket/lock of a crashed run in this directory
            f"--socket={munge_socket}",
            f"--key-file={cluster.conf_dir / 'munge.key'}",
            f"--pid-file={root / 'run' / 'munged.pid'}",
            f"--seed-file={root / 'run' / 'munged.seed'}",
            f"--log-file={root / 'log' / 'munged.log'}",
        ],
    )
    cluster._wait("munged socket", munge_socket.exists, 15)


def _write_gres(cluster: SlurmCluster, gpus: int) -> None:
    """gres.conf for `gpus` fake GPUs of type GPU_TYPE, or none.

    SLURM 22.05 silently drops a `gpu` GRES without `File=` ("Removing file-less GPU"), and it
    wants each File to be a character device, so every fake GPU is a symlink to /dev/null.
    """
    gres_conf = cluster.conf_dir / "gres.conf"
    if not gpus:
        gres_conf.unlink(missing_ok=True)
        return
    dev = cluster.root / "fakedev"
    dev.mkdir(exist_ok=True)
    for i in range(gpus):
        link = dev / f"gpu{i}"
        if not link.is_symlink():
            link.symlink_to("/dev/null")
    gres_conf.write_text(
        "# fake GPUs for scheduling tests: device files are symlinks to /dev/null\n"
        f"NodeName={cluster.host} Name=gpu Type={GPU_TYPE} File={dev}/gpu[0-{gpus - 1}]\n"
    )


def _start_slurm(cluster: SlurmCluster, settings: dict, gpus: int, timeout: float) -> str:
    """Write slurm.conf/gres.conf, start slurmctld + slurmd, return the node's settled state."""
    cluster.slurm_conf.write_text(render_slurm_conf(**settings, gpus=gpus))
    _write_gres(cluster, gpus)
    conf = str(cluster.slurm_conf)
    cluster._spawn("slurmctld", [_which("slurmctld"), "-D", "-c", "-i", "-f", conf])

    def controller_up() -> bool:
        return cluster.run("scontrol", "ping", check=False, timeout=10).returncode == 0

    cluster._wait("slurmctld", controller_up, timeout)
    cluster._spawn("slurmd", [_which("slurmd"), "-D", "-N", cluster.host, "-f", conf])
    settled: list[str] = []

    def node_settled() -> bool:
        state = cluster._node_state()
        if state == "idle" or state.startswith(_BAD_NODE_STATES):
            settled.append(state)
            return True
        return False

    cluster._wait(f"node {cluster.host} to register", node_settled, timeout)
    return settled[-1]


def start_cluster(root: Path, *, timeout: float = START_TIMEOUT_S, want_gpus: bool = True) -> SlurmCluster:
    """Write the configuration under `root`, start the daemons, wait for an idle node.

    The node first offers FAKE_GPUS fake GPUs; if SLURM rejects them (node invalid/drained) the
    controller and node are restarted without GRES and `cluster.gpus` is 0. Raises RuntimeError
    with the daemon logs if the node is not idle within `timeout` (daemons stopped again).
    """
    t0 = time.monotonic()
    root = Path(root).resolve()
    for sub in ("conf", "state", "spool", "log", "run"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    for stale in (root / "run").glob("*.pid"):  # a reused directory: never trust old pid files
        stale.unlink()
    run_dir = root / "run"
    if len(str(run_dir / "munge.socket")) > 100:  # AF_UNIX socket paths are limited to 108 bytes
        run_dir = Path(tempfile.mkdtemp(prefix="dgno-munge-"))
    munge_socket = run_dir / "munge.socket"

    conf_dir = root / "conf"
    key = conf_dir / "munge.key"
    if not key.exists():  # own key: never depends on, or leaks to, a system munged
        key.write_bytes(secrets.token_bytes(1024))
    key.chmod(0o600)
    for path in (root, conf_dir, run_dir, root / "log"):
        path.chmod(0o700)  # munged refuses group/world-writable key, socket and log directories

    env = {k: v for k, v in os.environ.items() if not k.startswith(_FOREIGN_ENV_PREFIXES)}
    env["SLURM_CONF"] = str(conf_dir / "slurm.conf")
    env["PATH"] = f"{_write_client_wrappers(root / 'bin', conf_dir / 'slurm.conf')}{os.pathsep}{env.get('PATH', '')}"
    host = _short_hostname()
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    memory = _real_memory_mb()
    settings = dict(
        root=root,
        host=host,
        cpus=cpus,
        real_memory_mb=memory,
        ctld_port=_free_port(),
        slurmd_port=_free_port(),
        munge_socket=munge_socket,
    )
    cluster = SlurmCluster(root=root, conf_dir=conf_dir, env=env, host=host, cpus=cpus, real_memory_mb=memory, gpus=0)
    try:
        _start_munged(cluster, munge_socket)
        for gpus in (FAKE_GPUS, 0) if want_gpus else (0,):
            remaining = max(5.0, timeout - (time.monotonic() - t0))
            state = _start_slurm(cluster, settings, gpus, remaining)
            if state == "idle":
                cluster.gpus = gpus
                break
            if gpus == 0:
                raise RuntimeError(f"node {host} is {state}, not idle\n{cluster.diagnostics()}")
            cluster.stop(keep_munged=True)  # the fake GRES was refused: retry without it
    except BaseException:
        cluster.stop()
        raise
    cluster.startup_s = time.monotonic() - t0
    return cluster


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory):
    """A running single-node SLURM (partition `debug`), stopped at the end of the session."""
    problems = missing_requirements()
    if problems:
        _unavailable("; ".join(problems))
    try:
        cluster = start_cluster(tmp_path_factory.mktemp("slurm"))
    except RuntimeError as exc:  # binaries present but the cluster does not come up: a real failure
        pytest.fail(f"SLURM test cluster did not start:\n{exc}", pytrace=False)
    try:
        yield cluster
    finally:
        cluster.stop()


def pytest_configure(config: pytest.Config) -> None:
    """Register the `slurm` marker when this module is loaded as a plugin (`pytest_plugins`)."""
    config.addinivalue_line("markers", "slurm: needs a real single-node SLURM (tests/slurm_cluster.py fixture)")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test that uses the cluster is a `slurm` test, so `-m "not slurm"` deselects it."""
    for item in items:
        if "slurm_cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slurm)
