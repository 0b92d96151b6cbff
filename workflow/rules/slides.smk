# Whole slides (target `slides`, docs/slides.md): each slide of the config's `slides` block restored
# where it is out of focus, one job per slide, as `dgno deblur-slide` restores it. Generated slides
# (slides.synthetic, the demo's) are written first. Which slides and networks: dgno.workflow.slides.


rule slide_synthetic:
    output:
        slide=catalogue.SYNTHETIC_SLIDE["slide"],
        manifest=catalogue.SYNTHETIC_SLIDE["manifest"],
    log:
        "results/logs/slides/synthetic_{slide}.log",
    benchmark:
        "results/benchmarks/slide_synthetic/{slide}.tsv"
    wildcard_constraints:
        slide=one_of(SYNTHETIC_SLIDES),
    conda:
        "../../envs/dgno.yaml"
    threads: threads_for("slide_synthetic")
    resources:
        **resources_for("slide_synthetic"),
    params:
        spec=synthetic_slide_settings,
    script:
        "../scripts/slide_synthetic.py"


# The restored slide, its tiles' decisions, summary and pictures: paths of the catalogue (SLIDE_FILES and
# the slide figures). A job stopped by SLURM's time limit keeps its finished tiles; the retry resumes.
rule restore_slide:
    input:
        slide=slide_input,
        model=slide_network,
    output:
        slide=catalogue.SLIDE_FILES["slide"],
        tiles=catalogue.SLIDE_FILES["tiles"],
        summary=catalogue.SLIDE_FILES["summary"],
        focus=figure_output("slide_focus"),
        before_after=figure_output("slide_before_after"),
    log:
        "results/logs/slides/{slide}.log",
    benchmark:
        "results/benchmarks/restore_slide/{slide}.tsv"
    wildcard_constraints:
        slide=one_of(SLIDES),
    conda:
        "../../envs/dgno.yaml"
    threads: threads_for("restore_slide")
    resources:
        **resources_for("restore_slide"),
    params:
        settings=slide_settings,
        options=slide_network_options,
        device=config["device"],
        caption=SLIDE_CAPTION,
    script:
        "../scripts/restore_slide.py"
