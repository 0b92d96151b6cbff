"""Whole-slide restoration: a scanner's slide in, a restored pyramidal OME-TIFF out, only where it is blurry."""
