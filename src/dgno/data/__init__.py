"""dgno.data: the datasets — generated offline, downloaded, or made from another dataset's sharp images."""

# Sources whose sharp images the workflow generates offline, and the generator's kind of image
# (dgno.data.demo): synthetic nuclei for the offline demo, and the geometric shapes of the paper's
# controlled synthetic experiment (which the paper also generated; hence not "demo" data).
GENERATED_SOURCES: dict[str, str] = {"demo_nuclei": "nuclei", "synthetic_shapes": "shapes"}
# Former source names still read, each with a deprecation message naming its replacement.
RENAMED_SOURCES: dict[str, str] = {"demo_shapes": "synthetic_shapes"}
