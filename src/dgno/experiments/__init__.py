"""The paper's experiments beyond the main tables: the non-blind Seidel comparison (nonblind, with its
settings and data), StarDist segmentation of restored images (stardist) and edge-band PSNR (edge_band)."""
