"""Running trained models on images: scoring a test split (evaluate), restoring a user's files (deblur),
large frames by blended tiles (tiling) and the forward pass replayed from CUDA graphs (cuda_graphs)."""
