"""dgno: reproduction pipeline for the Discontinuous Galerkin Neural Operator paper."""
__version__ = "0.1.0"
