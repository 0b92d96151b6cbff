"""Post-hoc analyses of trained networks (latent effective rank) and of model cost."""
