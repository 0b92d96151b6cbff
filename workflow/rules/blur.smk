# Stage 2: spatially varying blur of the sharp images, one folder per blur level.


rule sigma_blur:
    input:
        split="results/data/{dataset}/split.csv",
        gt="results/data/{dataset}/gt",
    output:
        blur=directory("results/data/{dataset}/blur/{level}"),
        sigma=directory("results/data/{dataset}/sigma/{level}"),
    log:
        "results/logs/blur/{dataset}/{level}.log",
    benchmark:
        "results/benchmarks/blur/{dataset}/{level}.tsv"
    wildcard_constraints:
        dataset=one_of(GENERATED + SIGMA_SETS),
    conda:
        "../../envs/dgno.yaml"
    threads: threads_for("sigma_blur")
    resources:
        **resources_for("sigma_blur"),
    params:
        sigma_range=lambda wc: config["datasets"][wc.dataset]["levels"][wc.level],
        correlation_length=lambda wc: config["datasets"][wc.dataset][
            "correlation_length"
        ],
    script:
        "../scripts/sigma_blur.py"


rule sigma_sharp:
    input:
        split=lambda wc: f"results/data/{config['datasets'][wc.dataset]['base']}/split.csv",
        gt=lambda wc: f"results/data/{config['datasets'][wc.dataset]['base']}/gt",
        manifest=lambda wc: f"results/data/{config['datasets'][wc.dataset]['base']}/manifest.json",
    output:
        split="results/data/{dataset}/split.csv",
        gt=directory("results/data/{dataset}/gt"),
        manifest="results/data/{dataset}/manifest.json",
    log:
        "results/logs/data/{dataset}.log",
    wildcard_constraints:
        dataset=one_of(SIGMA_SETS),
    conda:
        "../../envs/dgno.yaml"
    threads: threads_for("sigma_sharp")
    resources:
        **resources_for("sigma_sharp"),
    params:
        seed=config["seed"],
    script:
        "../scripts/sigma_sharp.py"
