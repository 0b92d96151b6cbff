#!/usr/bin/env bash
# Install the single-node SLURM used by tests/slurm_cluster.py: Debian's slurm-wlm
# (slurmctld, slurmd, client commands) and munge (its authentication daemon), as root.
# Idempotent: does nothing when every binary tests/slurm_cluster.py needs is already present.
set -euo pipefail

need=(slurmctld slurmd sbatch squeue sinfo scontrol scancel srun munged)
missing=0
for bin in "${need[@]}"; do
    # sbin paths are not always on root's PATH in minimal images.
    if ! PATH="$PATH:/usr/sbin:/sbin" command -v "$bin" >/dev/null 2>&1; then
        missing=1
    fi
done
if [[ $missing -eq 0 ]]; then
    echo "install_slurm: slurm-wlm and munge already installed"
    exit 0
fi

export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# --no-install-recommends keeps out the docs and mail tools; the daemons and clients
# come from slurm-wlm's dependencies (slurmctld, slurmd, slurm-client).
apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null
echo "install_slurm: installed $(dpkg-query -W -f='${Package} ${Version}' slurm-wlm), $(dpkg-query -W -f='${Package} ${Version}' munge)"
