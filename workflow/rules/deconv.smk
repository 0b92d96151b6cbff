# Stage 6: the Seidel-PSF non-blind comparison — calibration from noisy beads, brute-force Seidel blur
# plus camera noise (not the deconvolution operator), deconvolution, and the noise-sensitivity sweep.


rule seidel_calibration:
    output:
        "results/nonblind/{dataset}/calibration.json",
    log:
        "results/logs/nonblind/{dataset}/calibration.log",
    benchmark:
        "results/benchmarks/seidel_calibration/{dataset}.tsv"
    wildcard_constraints:
        dataset=one_of(SEIDEL),
    conda:
        "../../envs/dgno.yaml"
    threads: threads_for("seidel_calibration")
    resources:
        **resources_for("seidel_calibration"),
    params:
        seidel=lambda wc: canonical(config["datasets"][wc.dataset].get("seidel", {})),
        image_size=seidel_image_size,
        seed=config["seed"],
    script:
        "../scripts/seidel_calibration.py"


rule seidel_blur:
    input:
        unpack(seidel_base_inputs),
    output:
        split="results/data/{dataset}/split.csv",
        gt=directory("results/data/{dataset}/gt"),
        blur=directory("results/data/{dataset}/blur/seidel"),
        manifest="results/data/{dataset}/manifest.json",
        clean=directory("results/nonblind/{dataset}/clean"),
    log:
        "results/logs/nonblind/{dataset}/blur.log",
    benchmark:
        "results/benchmarks/seidel_blur/{dataset}.tsv"
    wildcard_constraints:
        dataset=one_of(SEIDEL),
    conda:
        "../../envs/dgno.yaml"
    threads: threads_for("seidel_blur")
    resources:
        **resources_for("seidel_blur"),
    params:
        seidel=seidel_data_settings,
        seed=config["seed"],
        device=config["device"],
    script:
        "../scripts/seidel_blur.py"


# One deconvolution rule. Wiener and Richardson-Lucy run on CPU cores; ring deconvolution (gradient
# descent through the ring forward model) on the GPU, so it is the same rule under a name of its own
# that only it asks a cluster for a GPU with (dgno.workflow.resources, profiles/slurm).
rule deconvolve:
    input:
        split="results/data/{dataset}/split.csv",
        blur="results/data/{dataset}/blur/{level}",
        calibration="results/nonblind/{dataset}/calibration.json",
    output:
        summary="results/eval/{dataset}/{deconv}/{level}/summary.json",
        per_image="results/eval/{dataset}/{deconv}/{level}/per_image.csv",
        restored=directory("results/eval/{dataset}/{deconv}/{level}/restored"),
    log:
        "results/logs/nonblind/{dataset}/{deconv}_{level}.log",
    benchmark:
        "results/benchmarks/deconvolve/{dataset}/{deconv}_{level}.tsv"
    wildcard_constraints:
        dataset=one_of(SEIDEL),
        deconv="wiener|richardson_lucy",
    conda:
        "../../envs/dgno.yaml"
    threads: threads_for("deconvolve")
    resources:
        **resources_for("deconvolve"),
    params:
        evaluate=canonical(
            {k: config["evaluate"][k] for k in ("tile", "overlap", "lpips")}
        ),
        deconv=deconv_settings(),
        device=lambda wc: config["device"] if wc.deconv == "ring" else "cpu",
    script:
        "../scripts/deconvolve.py"


use rule deconvolve as deconvolve_ring with:
    wildcard_constraints:
        dataset=one_of(SEIDEL),
        deconv="ring",
    threads: threads_for("deconvolve_ring")
    resources:
        **resources_for("deconvolve_ring"),


rule nonblind_sensitivity:
    input:
        unpack(sensitivity_inputs),
    output:
        "results/nonblind/{dataset}/sensitivity.csv",
    log:
        "results/logs/nonblind/{dataset}/sensitivity.log",
    benchmark:
        "results/benchmarks/nonblind_sensitivity/{dataset}.tsv"
    wildcard_constraints:
        dataset=one_of(SEIDEL),
    conda:
        "../../envs/dgno.yaml"
    threads: threads_for("nonblind_sensitivity")
    resources:
        **resources_for("nonblind_sensitivity"),
    params:
        deconv=deconv_settings(),
        deconvolution=DECONVOLUTION,
        read_sigmas=config["experiments"]
        .get("nonblind", {})
        .get("sensitivity_read_sigmas", []),
        seidel=seidel_data_settings,
        evaluate=canonical(
            {k: config["evaluate"][k] for k in ("tile", "overlap", "blend")}
        ),
        seed=config["seed"],
        device=config["device"],
    script:
        "../scripts/nonblind_sensitivity.py"
